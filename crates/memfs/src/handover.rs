//! Live upgrade (`uvfs_vfs::handover`): a memfs saved whole for a
//! successor process, and rebuilt there.
//!
//! # What goes
//! Everything a memfs is, since it lives in the server's memory: every
//! linked inode (metadata, attributes and ACLs, symlink targets,
//! directory entries with their readdir cookies, file pages with their
//! holes), the nameless inodes the kernel still knows (unlinked while
//! open, `O_TMPFILE`), and the inode number allocator. File pages go in
//! memfds that the successor uses in place (`pagefile.rs`), the rest in
//! `saved.rs`'s encoding.
//!
//! What needs no saving: handles (memfs's open and opendir return
//! `Fh(0)` and keep nothing per open, so every kept handle is valid as
//! it is), listing positions (a readdir offset carries its own cursor,
//! `dir.rs`, which the saved cookies make mean the same entries), and
//! budget usage (the restored inodes and pages take it anew, the same
//! amounts as `ispace.rs` and `budget.rs` charge). Nameless inodes that
//! the kernel no longer knows are left behind: they were on their way
//! out.
//!
//! # Nameless inodes after a restore
//! A linked inode is found by `vget` through the inode table. A nameless
//! one is in no table: `kept` holds it until the first `vget` makes a
//! vnode for it, then only watches it (a weak reference), so that, as on
//! the predecessor, the vnode alone keeps it alive and its last release
//! frees it. So the server must hold what `vget` returns for as long as
//! the kernel knows the node, as it does on the predecessor; one the
//! server never asks for stays held (and is handed on at the next
//! upgrade) until the file system goes.

use crate::dir::{Directory, Target};
use crate::fs::{MemFs, MemFsConfig};
use crate::inode::{Body, Inode, Meta};
use crate::ispace::INODE_COST;
use crate::kept::Kept;
use crate::pagefile::{self, SharedFile};
use crate::pages::{extend_runs, FileData, Placement};
use crate::saved::{
    self, SavedBody, SavedEntry, SavedInode, State, FORMAT, FORMAT_SHARED, FORMAT_V1,
};
use crate::table::ROOT_INO;
use crate::xattr::{Xattrs, XATTR_NAME_MAX, XATTR_SIZE_MAX};
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use uvfs_vfs::{Errno, Ino, Keep, Saved, VType, VfsResult, VnodeLayer, VnodeRef};

/// Below this many pages, copying on one thread is quicker than starting
/// others.
const PARALLEL_PAGES: u64 = 4096;

/// Each saved inode's type, and whether it is linked.
type Kinds = HashMap<Ino, (VType, bool)>;

/// Threads to copy `pages` pages on.
fn copiers(pages: u64) -> usize {
    if pages < PARALLEL_PAGES {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// `items` cut into at most `n` runs of about equal `weight`.
fn split<T>(items: Vec<T>, n: usize, weight: impl Fn(&T) -> u64) -> Vec<Vec<T>> {
    let total: u64 = items.iter().map(&weight).sum::<u64>().max(1);
    let share = total.div_ceil(n as u64).max(1);
    let mut out: Vec<Vec<T>> = vec![Vec::new()];
    let mut acc = 0;
    for item in items {
        let w = weight(&item);
        if acc >= share && out.len() < n {
            out.push(Vec::new());
            acc = 0;
        }
        acc += w;
        out.last_mut().expect("one group at least").push(item);
    }
    out
}

/// Runs `f` on each group on a thread of its own (the first on this
/// one); the first error wins.
fn on_threads<T: Send, R: Send>(
    groups: Vec<Vec<T>>,
    f: impl Fn(Vec<T>) -> VfsResult<R> + Sync,
) -> VfsResult<Vec<R>> {
    std::thread::scope(|s| {
        let mut groups = groups.into_iter();
        let first = groups.next();
        let others: Vec<_> = groups.map(|g| s.spawn(|| f(g))).collect();
        let mut out = Vec::with_capacity(others.len() + 1);
        if let Some(g) = first {
            out.push(f(g));
        }
        for h in others {
            out.push(h.join().unwrap_or(Err(Errno::EIO)));
        }
        out.into_iter().collect()
    })
}

impl MemFs {
    /// `FileSystem::save`: the whole file system, and the nameless inodes
    /// of `keep`. Changes nothing.
    pub(crate) fn save_state(&self, keep: &Keep<'_>) -> VfsResult<Saved> {
        let mut linked = self.table.snapshot();
        linked.sort_unstable_by_key(|i| i.ino);
        let mut kept = BTreeMap::new();
        let open = keep.open.iter().map(|(vp, _)| vp);
        for vp in keep.nodes.iter().chain(open) {
            let inode = self.inode_arc_of(vp)?;
            if inode.nlink() == 0 && self.table.get(inode.ino).is_none() {
                kept.insert(inode.ino, inode.clone());
            }
        }
        for inode in self.held_kept() {
            kept.entry(inode.ino).or_insert(inode);
        }
        let kept: Vec<Arc<Inode>> = kept.into_values().collect();
        let all: Vec<&Arc<Inode>> = linked.iter().chain(&kept).collect();

        // Files whose pages lie in order in a page file go on in it (the
        // successor maps the same memory); the others' pages are copied,
        // in a page file per copying thread.
        let mut places: Vec<Option<Place>> = (0..all.len()).map(|_| None).collect();
        let mut shared = SharedFiles::default();
        let mut files: Vec<(usize, &FileData)> = Vec::new();
        for (i, inode) in all.iter().enumerate() {
            let Some(f) = inode.file() else { continue };
            match f.placement() {
                Placement::Empty => {}
                Placement::InPlace {
                    file,
                    at,
                    runs,
                    reserved,
                } => {
                    places[i] = Some(Place {
                        file: shared.number(&file),
                        at,
                        runs,
                        reserved,
                    });
                }
                Placement::Elsewhere => files.push((i, f)),
            }
        }
        let (mut fds, mut pages) = shared.passed()?;
        let sharing = !fds.is_empty();
        let total: u64 = files.iter().map(|(_, f)| f.pages()).sum();
        let groups = match total {
            0 => Vec::new(),
            _ => split(files, copiers(total), |(_, f)| f.pages()),
        };
        let copied = on_threads(groups, |group| {
            let mut w = pagefile::Writer::new()?;
            let mut placed = Vec::with_capacity(group.len());
            for (i, f) in group {
                let at = w.pages();
                let (mut runs, mut reserved) = (Vec::new(), Vec::new());
                f.for_each_page(|idx, page, written| {
                    extend_runs(&mut runs, idx);
                    if !written {
                        extend_runs(&mut reserved, idx);
                    }
                    w.push(page)
                })?;
                placed.push((i, at, runs, reserved));
            }
            let pages = w.pages();
            Ok((w.finish()?, pages, placed))
        })?;
        for (fd, n, placed) in copied {
            let file = fds.len() as u32;
            fds.push(fd);
            pages.push(n);
            for (i, at, runs, reserved) in placed {
                places[i] = Some(Place {
                    file,
                    at,
                    runs,
                    reserved,
                });
            }
        }
        let mut places = places.into_iter();
        let mut encode = |inode: &Arc<Inode>| {
            let place = places.next().flatten().unwrap_or_default();
            save_inode(inode, place)
        };
        let state = State {
            next_ino: self.table.next_ino(),
            linked: linked.iter().map(&mut encode).collect(),
            kept: kept.iter().map(&mut encode).collect(),
            pages,
        };
        let reserves = |s: &SavedInode| matches!(s.body, SavedBody::FileReserved { .. });
        let format = match (
            sharing,
            state.linked.iter().chain(&state.kept).any(reserves),
        ) {
            (true, _) => FORMAT_SHARED,
            (false, true) => FORMAT,
            (false, false) => FORMAT_V1,
        };
        Ok(Saved {
            format: format.to_owned(),
            bytes: saved::encode(&state)?.into(),
            fds,
        })
    }

    /// `FileSystem::save_ahead`: moves the pages of files that are not
    /// in order in a page file worth passing on (in the heap, or in one
    /// mostly freed) to new page files, while requests are served, so
    /// that `save` passes them on instead of copying them while
    /// requests wait. Contents do not change; nothing is made for `save`.
    pub(crate) fn move_pages_ahead(&self) -> VfsResult<()> {
        let mut inodes = self.table.snapshot();
        inodes.extend(self.held_kept());
        let mut placed: Vec<(&FileData, Option<Arc<SharedFile>>)> = Vec::new();
        for inode in &inodes {
            let Some(f) = inode.file() else { continue };
            match f.placement() {
                Placement::Empty => {}
                Placement::InPlace { file, .. } => placed.push((f, Some(file))),
                Placement::Elsewhere => placed.push((f, None)),
            }
        }
        let keep = worth_keeping(placed.iter().filter_map(|(_, file)| file.as_ref()));
        let moving: Vec<&FileData> = placed
            .iter()
            .filter(|(_, file)| {
                !file
                    .as_ref()
                    .is_some_and(|sf| keep.contains(&Arc::as_ptr(sf)))
            })
            .map(|(f, _)| *f)
            .collect();
        let total: u64 = moving.iter().map(|f| f.pages()).sum();
        if total == 0 {
            return Ok(());
        }
        let groups = split(moving, copiers(total), |f| f.pages());
        on_threads(groups, |group| {
            let want: u64 = group.iter().map(|f| f.pages()).sum();
            // Room for files that grow meanwhile; a file that finds no
            // more room stays where it is, to be copied at the pause.
            let dest = SharedFile::create(want + want / 16 + 16, &self.lease)?;
            let mut next = 0;
            for f in group {
                if !f.migrate(&dest, &mut next)? {
                    break;
                }
            }
            Ok(())
        })?;
        Ok(())
    }

    /// A memfs on `layer` as a predecessor saved it (`FileSystem::save`),
    /// with `cfg`'s limits and atime rule (the root's owner and mode are
    /// the saved root's). `EPROTO` for a state of another format or one
    /// that is not a memfs; `ENOSPC` if `cfg`'s limits are below what the
    /// state holds.
    ///
    /// Its file data is the predecessor's memory, mapped: it gives no
    /// page back to the system until told it serves the mount
    /// (`FileSystem::taken_over`), and the predecessor must be told the
    /// mount is the successor's (`FileSystem::handed_over`) before it
    /// drops anything (`pagefile.rs`, "Who gives pages back").
    pub fn restore(
        layer: &Arc<VnodeLayer>,
        cfg: MemFsConfig,
        saved: Saved,
    ) -> VfsResult<Arc<MemFs>> {
        if ![FORMAT_SHARED, FORMAT, FORMAT_V1].contains(&saved.format.as_str()) {
            return Err(Errno::EPROTO);
        }
        let state = saved::decode(&saved.bytes)?;
        let reserves = |s: &SavedInode| matches!(s.body, SavedBody::FileReserved { .. });
        if saved.format == FORMAT_V1 && state.linked.iter().chain(&state.kept).any(reserves) {
            return Err(Errno::EPROTO);
        }
        let kinds = check(&state)?;
        if state.pages.len() != saved.fds.len() {
            return Err(Errno::EPROTO);
        }
        // Not giving pages back until this process serves the mount
        // (`pagefile.rs`, "Who gives pages back").
        let lease = pagefile::Lease::new(false);
        let files = (saved.fds.into_iter().zip(&state.pages))
            .map(|(fd, &n)| SharedFile::open(fd, n, &lease))
            .collect::<VfsResult<Vec<_>>>()?;

        let mut fs = MemFs::without_inodes(layer.clone(), &cfg);
        fs.lease = lease;
        *fs.restored_files.get_mut() = files.clone();
        fs.table.set_next_ino(state.next_ino);
        let weight = |s: &(&SavedInode, bool)| match &s.0.body {
            SavedBody::File { runs, .. } | SavedBody::FileReserved { runs, .. } => {
                1 + runs.iter().map(|r| r.1).sum::<u64>()
            }
            _ => 1,
        };
        let all: Vec<(&SavedInode, bool)> = (state.linked.iter().map(|s| (s, true)))
            .chain(state.kept.iter().map(|s| (s, false)))
            .collect();
        let total = state.pages.iter().fold(0u64, |a, &n| a.saturating_add(n));
        let work = total + all.len() as u64;
        let groups = split(all, copiers(work), weight);
        let kept = on_threads(groups, |group| {
            let mut kept = Vec::new();
            for (s, linked) in group {
                let inode = fs.build(s, &files, &kinds)?;
                if linked {
                    fs.table.insert(inode);
                } else {
                    kept.push(inode);
                }
            }
            Ok(kept)
        })?;
        {
            let mut k = fs.kept.lock();
            for inode in kept.into_iter().flatten() {
                k.0.insert(inode.ino, Kept::Held(inode));
            }
        }
        Ok(Arc::new(fs))
    }

    /// The inode `s` describes, its costs taken from the budgets.
    fn build(
        &self,
        s: &SavedInode,
        files: &[Arc<SharedFile>],
        kinds: &Kinds,
    ) -> VfsResult<Arc<Inode>> {
        let kind = saved::vtype(s.kind)?;
        let mut xattrs = Xattrs::default();
        for (name, value) in &s.xattrs {
            if name.is_empty() || name.len() > XATTR_NAME_MAX || value.len() > XATTR_SIZE_MAX {
                return Err(Errno::EPROTO);
            }
            xattrs.put(name, value);
        }
        // As `ispace.rs` charges: the inode (the root's is the budget's
        // from the start), its attributes, and each name past the first.
        let links = match kind {
            VType::Dir => 0,
            _ => u64::from(s.nlink.saturating_sub(1)),
        };
        let own = if s.ino == ROOT_INO { 0 } else { INODE_COST };
        let cost = own + xattrs.space() + links * INODE_COST;
        self.ispace.take(cost)?;
        let body = match self.body(kind, &s.body, files, kinds) {
            Ok(b) => b,
            Err(e) => {
                self.ispace.give(cost);
                return Err(e);
            }
        };
        let [atime, mtime, ctime, btime] = s.times;
        let meta = Meta {
            perm: s.perm & 0o7777,
            uid: s.uid,
            gid: s.gid,
            nlink: s.nlink,
            linkable: s.linkable,
            rdev: s.rdev,
            atime: atime.timespec()?,
            mtime: mtime.timespec()?,
            ctime: ctime.timespec()?,
            btime: btime.timespec()?,
            xattrs,
            flags: s.flags,
        };
        Ok(Arc::new(Inode::new(
            s.ino,
            kind,
            meta,
            body,
            self.ispace.clone(),
        )))
    }

    /// A regular file's restored body (`FileData::restored`).
    fn file_body(
        &self,
        size: u64,
        runs: &[(u64, u64)],
        file: Option<&Arc<SharedFile>>,
        at: u64,
        reserved: &[(u64, u64)],
    ) -> VfsResult<Body> {
        let f = FileData::restored(self.budget.clone(), size, runs, file, at, reserved)
            .map_err(|e| if e == Errno::ENOSPC { e } else { Errno::EPROTO })?;
        Ok(Body::File(f))
    }

    fn body(
        &self,
        kind: VType,
        b: &SavedBody,
        files: &[Arc<SharedFile>],
        kinds: &Kinds,
    ) -> VfsResult<Body> {
        Ok(match (kind, b) {
            (
                VType::Reg,
                SavedBody::File {
                    size,
                    runs,
                    file,
                    at,
                },
            ) => self.file_body(*size, runs, files.get(*file as usize), *at, &[])?,
            (
                VType::Reg,
                SavedBody::FileReserved {
                    size,
                    runs,
                    file,
                    at,
                    reserved,
                },
            ) => self.file_body(*size, runs, files.get(*file as usize), *at, reserved)?,
            (
                VType::Dir,
                SavedBody::Dir {
                    parent,
                    removed,
                    next_cookie,
                    entries,
                },
            ) => {
                let entries = entries
                    .iter()
                    .map(|e| {
                        let kind = kinds.get(&e.ino).ok_or(Errno::EPROTO)?.0;
                        let target = Target { ino: e.ino, kind };
                        Ok((e.cookie, e.name.as_slice().into(), target))
                    })
                    .collect::<VfsResult<Vec<_>>>()?;
                let d = Directory::restored(*parent, *removed, *next_cookie, entries)
                    .ok_or(Errno::EPROTO)?;
                Body::Dir(RwLock::new(d))
            }
            (VType::Lnk, SavedBody::Symlink(t)) => {
                uvfs_vfs::check_symlink_target(t).map_err(|_| Errno::EPROTO)?;
                Body::Symlink(t.as_slice().into())
            }
            (VType::Chr | VType::Blk | VType::Fifo | VType::Sock, SavedBody::Special) => {
                Body::Special
            }
            _ => return Err(Errno::EPROTO),
        })
    }

    /// Nameless inodes handed over to this process and not asked for
    /// since: the kernel may still know them.
    fn held_kept(&self) -> Vec<Arc<Inode>> {
        let kept = self.kept.lock();
        (kept.0.values())
            .filter_map(|k| match k {
                Kept::Held(inode) => Some(inode.clone()),
                Kept::Lent(_) => None,
            })
            .collect()
    }

    /// `FileSystem::taken_over`: takes the lease (`pagefile.rs`), and
    /// gives back the pages of the page files no file of this memfs took.
    pub(crate) fn take_lease(&self) {
        self.lease.set(true);
        for f in std::mem::take(&mut *self.restored_files.lock()) {
            f.give_back_unclaimed();
        }
    }

    /// The kernel let go of a nameless inode a predecessor handed over,
    /// never asked for since: nothing else holds it (a vnode made for it
    /// would have made it `Lent`), and its data goes.
    pub(crate) fn let_kept_go(&self, ino: Ino) {
        let mut kept = self.kept.lock();
        if let Some(Kept::Held(_)) = kept.0.get(&ino) {
            let gone = kept.0.remove(&ino);
            drop(kept);
            // Freed outside the table's lock.
            drop(gone);
        }
    }

    /// `vget` of a nameless inode a predecessor handed over.
    pub(crate) fn vget_kept(&self, ino: Ino) -> Option<VnodeRef> {
        let inode = {
            let mut kept = self.kept.lock();
            let found = match kept.0.get(&ino)? {
                Kept::Held(i) => Some(i.clone()),
                Kept::Lent(w) => w.upgrade(),
            };
            match found {
                Some(i) => i,
                None => {
                    kept.0.remove(&ino);
                    return None;
                }
            }
        };
        let vp = self.vnode(&inode).ok()?;
        if let Some(k) = self.kept.lock().0.get_mut(&ino) {
            *k = Kept::Lent(Arc::downgrade(&inode));
        }
        Some(vp)
    }
}

/// The page files a save passes on as they are, numbered in the order
/// first met.
#[derive(Default)]
struct SharedFiles {
    files: Vec<Arc<SharedFile>>,
    numbers: HashMap<*const SharedFile, u32>,
}

impl SharedFiles {
    fn number(&mut self, file: &Arc<SharedFile>) -> u32 {
        let next = self.files.len() as u32;
        *self.numbers.entry(Arc::as_ptr(file)).or_insert_with(|| {
            self.files.push(file.clone());
            next
        })
    }

    /// Their descriptors (duplicates) and sizes in pages.
    fn passed(&self) -> VfsResult<(Vec<OwnedFd>, Vec<u64>)> {
        let fds = self
            .files
            .iter()
            .map(|f| f.dup())
            .collect::<VfsResult<_>>()?;
        Ok((fds, self.files.iter().map(|f| f.pages()).collect()))
    }
}

/// Most page files a memfs passes on: past that many, the smallest's
/// pages move to a new one ahead of the pause.
const MAX_PAGE_FILES: usize = 32;

/// Of the page files `in_place` files lie in (one per file), those worth
/// passing on as they are: at least half their pages in use (one mostly
/// freed would carry its holes on forever), and the largest
/// `MAX_PAGE_FILES` of those (each upgrade adds some).
fn worth_keeping<'a>(
    in_place: impl Iterator<Item = &'a Arc<SharedFile>>,
) -> HashSet<*const SharedFile> {
    let mut seen: HashMap<*const SharedFile, &Arc<SharedFile>> = HashMap::new();
    for f in in_place {
        seen.entry(Arc::as_ptr(f)).or_insert(f);
    }
    let mut dense: Vec<&Arc<SharedFile>> = seen
        .into_values()
        .filter(|f| f.live().saturating_mul(2) >= f.pages())
        .collect();
    dense.sort_unstable_by_key(|f| std::cmp::Reverse(f.live()));
    dense.truncate(MAX_PAGE_FILES);
    dense.into_iter().map(Arc::as_ptr).collect()
}

/// Where a file's pages went: page file, first page there, and the runs
/// of indices they hold.
#[derive(Default)]
struct Place {
    file: u32,
    at: u64,
    runs: Vec<(u64, u64)>,
    /// Of those, the pages preallocated and never written.
    reserved: Vec<(u64, u64)>,
}

/// One inode's saved form (its pages already in a page file at `place`).
fn save_inode(inode: &Inode, place: Place) -> SavedInode {
    // The body before the metadata: `meta` is the innermost lock.
    let body = match &inode.body {
        Body::File(f) if place.reserved.is_empty() => SavedBody::File {
            size: f.size(),
            runs: place.runs,
            file: place.file,
            at: place.at,
        },
        Body::File(f) => SavedBody::FileReserved {
            size: f.size(),
            runs: place.runs,
            file: place.file,
            at: place.at,
            reserved: place.reserved,
        },
        Body::Dir(d) => {
            let d = d.read();
            SavedBody::Dir {
                parent: d.parent,
                removed: d.removed,
                next_cookie: d.next_cookie(),
                entries: d
                    .entries()
                    .map(|(cookie, name, t)| SavedEntry {
                        cookie,
                        name: name.to_vec(),
                        ino: t.ino,
                    })
                    .collect(),
            }
        }
        Body::Symlink(t) => SavedBody::Symlink(t.to_vec()),
        Body::Special => SavedBody::Special,
    };
    let m = inode.meta.lock();
    SavedInode {
        ino: inode.ino,
        kind: inode.kind as u8,
        perm: m.perm,
        uid: m.uid,
        gid: m.gid,
        nlink: m.nlink,
        linkable: m.linkable,
        rdev: m.rdev,
        times: [
            m.atime.into(),
            m.mtime.into(),
            m.ctime.into(),
            m.btime.into(),
        ],
        flags: m.flags,
        xattrs: m
            .xattrs
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect(),
        body,
    }
}

/// `EPROTO` unless `state` is one file system: unique inode numbers below
/// the allocator's next, a linked root directory, linked inodes with
/// links and kept ones without, and every name pointing at a linked
/// inode, as many names as each has links, each directory named once, in
/// its parent.
fn check(state: &State) -> VfsResult<Kinds> {
    let bad = Err(Errno::EPROTO);
    let mut kinds = Kinds::with_capacity(state.linked.len() + state.kept.len());
    let mut parents = HashMap::new();
    let all = (state.linked.iter().map(|s| (s, true))).chain(state.kept.iter().map(|s| (s, false)));
    for (s, linked) in all {
        let kind = saved::vtype(s.kind)?;
        if s.ino == 0 || s.ino >= state.next_ino || kinds.insert(s.ino, (kind, linked)).is_some() {
            return bad;
        }
        if linked != (s.nlink > 0) {
            return bad;
        }
        if let SavedBody::Dir {
            removed,
            entries,
            parent,
            ..
        } = &s.body
        {
            // A removed directory is nameless and empty.
            if *removed == linked || (!linked && !entries.is_empty()) {
                return bad;
            }
            if linked {
                parents.insert(s.ino, *parent);
            }
        }
    }
    if kinds.get(&ROOT_INO) != Some(&(VType::Dir, true))
        || parents.get(&ROOT_INO) != Some(&ROOT_INO)
    {
        return bad;
    }
    let mut names: HashMap<Ino, u64> = HashMap::with_capacity(state.linked.len());
    for s in &state.linked {
        let SavedBody::Dir { entries, .. } = &s.body else {
            continue;
        };
        for e in entries {
            if uvfs_vfs::check_new_name(&e.name).is_err() {
                return bad;
            }
            match kinds.get(&e.ino) {
                Some((VType::Dir, true)) if parents.get(&e.ino) == Some(&s.ino) => {}
                Some((VType::Dir, _)) | Some((_, false)) | None => return bad,
                Some(_) => {}
            }
            *names.entry(e.ino).or_default() += 1;
        }
    }
    for s in &state.linked {
        let n = names.get(&s.ino).copied().unwrap_or(0);
        let want = match kinds.get(&s.ino) {
            Some((VType::Dir, _)) if s.ino == ROOT_INO => 0,
            Some((VType::Dir, _)) => 1,
            _ => u64::from(s.nlink),
        };
        if n != want {
            return bad;
        }
    }
    // Every linked inode under the root (no cycle of directories that
    // name each other beside the tree: `..` walks must end at the root).
    let entries: HashMap<Ino, &Vec<SavedEntry>> = state
        .linked
        .iter()
        .filter_map(|s| match &s.body {
            SavedBody::Dir { entries, .. } => Some((s.ino, entries)),
            _ => None,
        })
        .collect();
    let mut seen = std::collections::HashSet::from([ROOT_INO]);
    let mut todo = vec![ROOT_INO];
    while let Some(dir) = todo.pop() {
        for e in entries.get(&dir).into_iter().flat_map(|v| v.iter()) {
            if seen.insert(e.ino) && parents.contains_key(&e.ino) {
                todo.push(e.ino);
            }
        }
    }
    if seen.len() != state.linked.len() {
        return bad;
    }
    Ok(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uvfs_vfs::{Ctx, Fh, FileSystem};

    /// A memfs with two files of two pages each and a subdirectory, its
    /// saved state decoded, and a function that restores a changed one.
    fn state() -> (Saved, State) {
        let fs = MemFs::new(
            VnodeLayer::new(uvfs_vnode::Config::with_limit(64)),
            MemFsConfig::default(),
        );
        let root = fs.root().unwrap();
        for name in [&b"a"[..], b"b"] {
            let (f, _) = fs.create(&Ctx::ROOT, &root, name, 0o644, 0).unwrap();
            fs.write(&f, Fh(0), 0, &[1; 2 * PAGE]).unwrap();
        }
        let d = fs.mkdir(&Ctx::ROOT, &root, b"d", 0o755).unwrap();
        fs.mkdir(&Ctx::ROOT, &d, b"e", 0o755).unwrap();
        state_of(&fs)
    }

    const PAGE: usize = crate::pages::PAGE_SIZE;

    fn restore_changed(saved: Saved, state: &State) -> VfsResult<()> {
        let saved = Saved {
            bytes: saved::encode(state).unwrap().into(),
            ..saved
        };
        let layer = VnodeLayer::new(uvfs_vnode::Config::with_limit(64));
        MemFs::restore(&layer, MemFsConfig::default(), saved).map(drop)
    }

    fn find(state: &mut State, ino: Ino) -> &mut SavedInode {
        state.linked.iter_mut().find(|s| s.ino == ino).unwrap()
    }

    #[test]
    fn the_unchanged_state_restores() {
        let (saved, state) = state();
        assert_eq!(restore_changed(saved, &state), Ok(()));
    }

    #[test]
    fn preallocated_pages_stay_holes_in_format_2_and_format_1_is_kept_without_them() {
        let (saved, _) = state();
        // No preallocated page: format 1, which an older build reads.
        assert_eq!(saved.format, FORMAT_V1);
        let fs = MemFs::new(
            VnodeLayer::new(uvfs_vnode::Config::with_limit(64)),
            MemFsConfig::default(),
        );
        let root = fs.root().unwrap();
        let (f, _) = fs.create(&Ctx::ROOT, &root, b"p", 0o644, 0).unwrap();
        fs.fallocate(&f, Fh(0), uvfs_vfs::FallocMode(0), 0, 4 * PAGE as u64)
            .unwrap();
        fs.write(&f, Fh(0), PAGE as u64, b"x").unwrap();
        let (saved, mut state) = state_of(&fs);
        assert_eq!(saved.format, FORMAT);
        let layer = VnodeLayer::new(uvfs_vnode::Config::with_limit(64));
        let new = MemFs::restore(&layer, MemFsConfig::default(), saved).unwrap();
        let f = new.lookup(&Ctx::ROOT, &new.root().unwrap(), b"p").unwrap();
        let p = PAGE as u64;
        assert_eq!(new.seek_data(&f, Fh(0), 0, false), Ok(p));
        assert_eq!(new.seek_data(&f, Fh(0), p, true), Ok(2 * p));
        assert_eq!(new.seek_data(&f, Fh(0), 2 * p, false), Err(Errno::ENXIO));
        assert_eq!(new.getattr(&f).unwrap().blocks, 4 * p / 512);
        drop((f, new));
        // Reserved pages that are not among the file's are refused.
        let ino = state
            .linked
            .iter()
            .find(|s| matches!(s.body, SavedBody::FileReserved { .. }))
            .unwrap()
            .ino;
        let (saved, _) = state_of(&fs);
        if let SavedBody::FileReserved { reserved, .. } = &mut find(&mut state, ino).body {
            reserved.push((9, 1));
        }
        assert_eq!(restore_changed(saved, &state), Err(Errno::EPROTO));
        // And format 2's variant is refused in a state that says format 1.
        let (mut saved, state) = state_of(&fs);
        saved.format = FORMAT_V1.into();
        assert_eq!(restore_changed(saved, &state), Err(Errno::EPROTO));
    }

    fn state_of(fs: &MemFs) -> (Saved, State) {
        let saved = fs
            .save(&Keep {
                nodes: &[],
                open: &[],
                ahead: None,
            })
            .unwrap();
        let state = saved::decode(&saved.bytes).unwrap();
        (saved, state)
    }

    #[test]
    fn two_files_on_the_same_pages_are_refused() {
        let (saved, mut state) = state();
        // Files 2 and 3 ("a" and "b"): b pointed at a's pages.
        let at_a = match &find(&mut state, 2).body {
            SavedBody::File { at, file, .. } => (*at, *file),
            _ => unreachable!(),
        };
        if let SavedBody::File { at, file, .. } = &mut find(&mut state, 3).body {
            (*at, *file) = at_a;
        }
        assert_eq!(restore_changed(saved, &state), Err(Errno::EPROTO));
    }

    #[test]
    fn directories_outside_the_tree_are_refused() {
        let (saved, mut state) = state();
        // d (4) and e (5) name each other, d no longer in the root.
        if let SavedBody::Dir { entries, .. } = &mut find(&mut state, ROOT_INO).body {
            entries.retain(|e| e.ino != 4);
        }
        if let SavedBody::Dir {
            entries, parent, ..
        } = &mut find(&mut state, 5).body
        {
            *parent = 4;
            entries.push(SavedEntry {
                cookie: 3,
                name: b"loop".to_vec(),
                ino: 4,
            });
        }
        if let SavedBody::Dir {
            next_cookie,
            parent,
            ..
        } = &mut find(&mut state, 4).body
        {
            *parent = 5;
            *next_cookie = 4;
        }
        assert_eq!(restore_changed(saved, &state), Err(Errno::EPROTO));
    }

    #[test]
    fn a_link_count_that_does_not_match_the_names_is_refused() {
        let (saved, mut state) = state();
        find(&mut state, 2).nlink = 2;
        assert_eq!(restore_changed(saved, &state), Err(Errno::EPROTO));
    }

    #[test]
    fn an_inode_number_the_allocator_would_give_again_is_refused() {
        let (saved, mut state) = state();
        state.next_ino = 5;
        assert_eq!(restore_changed(saved, &state), Err(Errno::EPROTO));
    }
}
