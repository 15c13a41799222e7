//! The taking side of a live upgrade: a process started as
//! `BINARY __takeover FD` receives the state on FD, and the program
//! (the CLI) rebuilds its file system from it and serves the connection
//! with `serve_successor` (`mount.rs`).

use super::state::{monotonic_ns, ServerState};
use super::wire;
use crate::handles::OpenFile;
use crate::server::Inner;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{Errno, Saved, VfsResult};

/// What a successor received from the server it replaces.
pub struct Handoff {
    sock: UnixStream,
    pub(crate) state: ServerState,
    pub(crate) dev: Option<OwnedFd>,
    /// The predecessor's FUSE-over-io_uring entries holding requests.
    pub(crate) ring: Vec<fuser::RingEntry>,
    fs: Option<Saved>,
    /// A crashed server's journal, read (`supervise/`).
    journal: Option<crate::journal::Contents>,
    /// Its table, which this server goes on writing.
    pub(crate) resumable: Option<crate::journal::Resumable>,
    /// The mount's supervisor, to link to.
    pub(crate) link: Option<OwnedFd>,
    /// Descriptors the crashed server's file system had kept.
    kept: Vec<uvfs_vfs::KeptFd>,
    /// The nodes sent ahead, brought up to date with the state's (which
    /// are then only those changed since: `ahead.rs`), until `import`
    /// adopts them.
    ahead: std::cell::Cell<Option<super::ahead::Ahead>>,
    /// Whether nodes came ahead, and how many the kernel holds.
    came_ahead: bool,
    held: usize,
    /// When the state was in and read, ms after the predecessor parked:
    /// logged at the first `mark` (the program sets its logger up only
    /// once it has the options the state carries).
    received_ms: std::cell::Cell<Option<(u64, u64)>>,
}

fn invalid(why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.into())
}

/// In a process started as `BINARY __takeover FD`: says hello on FD,
/// receives the predecessor's state, and returns it (the predecessor
/// waits meanwhile, its requests parked).
pub fn receive(fd_arg: &str) -> std::io::Result<Handoff> {
    let sock = wire::inherited_socket(fd_arg, "predecessor")?;
    let told = std::env::var(super::state::VERSION_ENV).ok();
    let hello = serde_json::json!({
        "state_version": super::state::hello_version(told.as_deref()),
        "state_versions": super::state::READS,
        // The state may come in a sealed memfd (`wire::send_parts_sealed`).
        "frames_in_memfd": true,
        // The nodes may come first, while the predecessor serves.
        "nodes_ahead": true,
        "pid": std::process::id(),
    });
    wire::send(&sock, hello.to_string().as_bytes(), &[])?;
    let mut ahead = None;
    let (bytes, mut fds) = loop {
        let (bytes, fds) = wire::recv(&sock)?;
        if !super::ahead::is_ahead(&bytes) {
            break (bytes, fds);
        }
        match super::ahead::Ahead::decode(&bytes) {
            Ok(a) => {
                let sent = a.nodes.len() + usize::from(a.root.is_some());
                reply(&sock, serde_json::json!({ "ahead": sent }))?;
                ahead = Some(a);
            }
            Err(e) => {
                let _ = reply(&sock, serde_json::json!({ "error": e.to_string() }));
                return Err(e);
            }
        }
    };
    let t_in = monotonic_ns();
    let mut state = match ServerState::decode(&bytes) {
        Ok(s) => s,
        Err(e) => {
            let _ = reply(&sock, serde_json::json!({ "error": e.to_string() }));
            return Err(e);
        }
    };
    if let Some(a) = &mut ahead {
        a.apply(&state.nodes);
    }
    let want = 1
        + state.ring.len()
        + state.fs_fds as usize
        + state.kept.len()
        + usize::from(state.journal || state.journal_live)
        + usize::from(state.link);
    if fds.len() != want {
        return Err(invalid(format!(
            "{} descriptors received, {want} expected",
            fds.len(),
        )));
    }
    let link = if state.link { fds.pop() } else { None };
    let read = match (state.journal, state.journal_live) {
        (true, _) => {
            crate::journal::read(fds.pop().expect("counted")).map(|(c, r)| (Some(c), Some(r)))
        }
        (false, true) => {
            crate::journal::resumable(fds.pop().expect("counted")).map(|r| (None, Some(r)))
        }
        (false, false) => Ok((None, None)),
    };
    let (journal, resumable) = match read {
        Ok(x) => x,
        Err(e) => {
            let _ = reply(&sock, serde_json::json!({ "error": e.to_string() }));
            return Err(e);
        }
    };
    let kept_fds = fds.split_off(1 + state.ring.len() + state.fs_fds as usize);
    // A crashed server's io_uring entries are kept beside its file
    // system's descriptors (`supervise::Link`).
    let (ring_kept, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut state.kept)
        .into_iter()
        .zip(kept_fds)
        .map(|((key, meta), fd)| uvfs_vfs::KeptFd { key, meta, fd })
        .partition(|k| super::kept_ring::parse(&k.meta).is_some());
    let fs_fds = fds.split_off(1 + state.ring.len());
    let mut ring: Vec<_> = std::mem::take(&mut state.ring)
        .into_iter()
        .zip(fds.split_off(1))
        .map(|((qid, addr, replied), memfd)| fuser::RingEntry {
            qid,
            addr,
            replied,
            recovered: false,
            memfd,
        })
        .collect();
    ring.extend(ring_kept.into_iter().filter_map(|k| {
        let (qid, addr) = super::kept_ring::parse(&k.meta)?;
        Some(fuser::RingEntry {
            qid,
            addr,
            replied: false,
            recovered: true,
            memfd: k.fd,
        })
    }));
    // The entries go where the predecessor had them, before this process
    // maps anything else there (`fuser::premap_ring_entries`).
    if let Some(payload) = fuser::Negotiated::from_bytes(&state.negotiated)
        .ok()
        .and_then(|n| n.io_uring_payload)
    {
        fuser::premap_ring_entries(&ring, usize::try_from(payload).unwrap_or(usize::MAX));
    }
    let dev = fds.pop();
    let received_ms = (
        t_in.saturating_sub(state.parked_at_ns) / 1_000_000,
        monotonic_ns().saturating_sub(state.parked_at_ns) / 1_000_000,
    );
    let held = match &ahead {
        Some(a) => a.held(),
        None => state.nodes.iter().filter(|n| n.count > 0).count(),
    };
    let fs = Saved {
        format: state.fs_format.clone(),
        bytes: std::mem::take(&mut state.fs_bytes),
        fds: fs_fds,
    };
    Ok(Handoff {
        sock,
        state,
        dev,
        ring,
        fs: Some(fs),
        journal,
        resumable,
        link,
        kept,
        came_ahead: ahead.is_some(),
        held,
        ahead: std::cell::Cell::new(ahead),
        received_ms: std::cell::Cell::new(Some(received_ms)),
    })
}

fn reply(sock: &UnixStream, v: serde_json::Value) -> std::io::Result<()> {
    wire::send(sock, v.to_string().as_bytes(), &[])
}

impl Handoff {
    /// Logs that the hand-over reached `what`, with the time since the
    /// predecessor parked its request loops.
    pub fn mark(&self, what: &str) {
        if let Some((got, read)) = self.received_ms.take() {
            log::debug!(
                "taking over: state received at +{got} ms, read at +{read} ms ({} nodes{})",
                self.held,
                match self.came_ahead {
                    true => format!(", {} sent again", self.state.nodes.len()),
                    false => String::new(),
                }
            );
        }
        let ms = monotonic_ns().saturating_sub(self.state.parked_at_ns) / 1_000_000;
        log::debug!("taking over: {what} at +{ms} ms");
    }

    /// The program's own state (`Successor::app`).
    pub fn app(&self) -> &[u8] {
        &self.state.app
    }

    /// The file system's state, for its restore constructor (once).
    pub fn take_fs(&mut self) -> Option<Saved> {
        self.fs.take()
    }

    /// What a crashed predecessor's journal says the kernel knows, for the
    /// file system's restore constructor (None: a live upgrade, whose
    /// state `take_fs` holds).
    pub fn take_recovery(&mut self) -> Option<uvfs_vfs::Recovery> {
        let c = self.journal.as_ref()?;
        Some(uvfs_vfs::Recovery {
            kept: std::mem::take(&mut self.kept),
            nodes: c.nodes.iter().map(|(ino, _, rec)| (*ino, *rec)).collect(),
            opens: c
                .opens
                .iter()
                .map(|(_, o)| uvfs_vfs::RecoveredOpen {
                    ino: o.ino,
                    fh: o.fh(),
                    flags: o.flags,
                    dir: o.dir,
                })
                .collect(),
        })
    }

    /// Whether this server replaces one that crashed.
    pub fn recovering(&self) -> bool {
        self.state.journal
    }

    /// Which server of the mount this is (1 for the first successor).
    pub fn generation(&self) -> u64 {
        self.state.generation
    }

    pub(crate) fn negotiated(&self) -> &[u8] {
        &self.state.negotiated
    }

    pub(crate) fn take_dev(&mut self) -> Option<OwnedFd> {
        self.dev.take()
    }

    /// Open nodes' I/O modes: node id, backing id, opens (`node_id`
    /// maps an inode number to its node id).
    pub(crate) fn backings(&self, node_id: impl Fn(u64) -> u64) -> Vec<(u64, Option<u32>, u64)> {
        let Some(c) = &self.journal else {
            return self.state.backings.clone();
        };
        let mut modes: std::collections::BTreeMap<u64, (Option<u32>, u64)> = Default::default();
        for (_, o) in &c.opens {
            if let Some(id) = o.backing {
                modes.entry(node_id(o.ino)).or_insert((id, 0)).1 += 1;
            }
        }
        modes
            .into_iter()
            .map(|(node, (id, opens))| (node, id, opens))
            .collect()
    }

    pub(crate) fn mount(&self) -> &super::state::MountState {
        &self.state.mount
    }

    /// Gives up before taking the connection: the predecessor serves on
    /// and reports `why`.
    pub fn fail(self, why: &str) {
        let _ = reply(&self.sock, serde_json::json!({ "error": why }));
    }

    /// Says the connection is being taken: from here the predecessor
    /// does not serve again.
    pub(crate) fn taking(&self) -> std::io::Result<()> {
        reply(&self.sock, serde_json::json!({ "taking": true }))
    }

    /// Says the connection is served here; returns the pause requests
    /// saw, microseconds.
    pub(crate) fn done(self) -> u64 {
        let pause_us = monotonic_ns().saturating_sub(self.state.parked_at_ns) / 1000;
        let _ = reply(
            &self.sock,
            serde_json::json!({ "ok": true, "pause_us": pause_us }),
        );
        pause_us
    }
}

/// Rebuilds the server's nodes, handles and counters from `state` (the
/// file system already restored). Every node and handle must resolve:
/// one that does not would answer ESTALE or EBADF to a program that did
/// nothing wrong, so the upgrade is refused instead.
pub(crate) fn import(inner: &Inner, handoff: &Handoff) -> VfsResult<()> {
    let recovered;
    let state = match &handoff.journal {
        Some(c) => {
            recovered = from_journal(inner, &handoff.state, c);
            &recovered
        }
        None => &handoff.state,
    };
    let vget = |ino: u64| -> VfsResult<uvfs_vfs::VnodeRef> {
        let root = inner.fs.root()?;
        if root.ino() == ino {
            return Ok(root);
        }
        inner.fs.vget(ino)
    };
    // Nodes are found when the kernel names them (`nodes.rs`, "Adopted
    // nodes"); the root now.
    if let Some(ahead) = handoff.ahead.take() {
        // Each id was checked to be its inode number but for the
        // sender's root swap (`Ahead::decode`): so with the same root,
        // every id here is the same node.
        let root = inner.fs.root()?;
        if let Some((ino, count)) = ahead.root {
            if ino != root.ino() {
                log::error!("the root is inode {ino} in the state, {} here", root.ino());
                return Err(Errno::EPROTO);
            }
            inner.nodes.adopt(&root, count);
        }
        log::debug!("adopting {} nodes (sent ahead)", ahead.nodes.len());
        inner.nodes.adopt_sorted(ahead.nodes);
    } else {
        adopt_listed(inner, state)?;
    }
    let fs = Arc::downgrade(&inner.fs);
    inner.nodes.set_resolver(Box::new(move |ino| {
        fs.upgrade().ok_or(Errno::ESTALE)?.vget(ino)
    }));
    let mut lost = 0;
    for h in &state.handles {
        let vp = match vget(h.ino) {
            Ok(vp) => vp,
            // After a crash, a file the journal says is open may be gone
            // from the source (removed while its RELEASE, which the kernel
            // sends in the background, was still on its way): the file
            // system left that open out, and so does the table, so the
            // kernel's next request on it gets EBADF. A live upgrade
            // hands over only what its predecessor holds: there it is a
            // fault, and the predecessor serves on.
            Err(e) if handoff.recovering() => {
                log::warn!("open handle {} (inode {}) not recovered: {e}", h.fh, h.ino);
                inner.handles.unrecovered(h.fh);
                lost += 1;
                continue;
            }
            Err(e) => {
                log::error!("handle {} (inode {}): {e}", h.fh, h.ino);
                return Err(e);
            }
        };
        if h.kernel_writer {
            if let Some(node) = h.backing_node {
                // Its backing file, if still open, is in `written`.
                inner.backings.writers.opened(node, false);
            }
        }
        inner.handles.insert_at(
            h.fh,
            OpenFile {
                vp,
                fh: uvfs_vfs::Fh(h.fs_fh),
                writable: h.writable,
                backing_node: h.backing_node,
                kernel_writer: h.kernel_writer,
                flags: h.flags,
                backing_id: h.backing_id,
            },
            state.next_handle,
        );
    }
    if lost > 0 {
        log::warn!(
            "{lost} open handles of the crashed server are gone: requests on them get EBADF"
        );
    }
    for &(node, files) in &state.written {
        inner.backings.writers.import(node, files);
    }
    inner.no_opendir.store(state.no_opendir, Ordering::Relaxed);
    inner
        .backings
        .on
        .store(state.backings_on, Ordering::Relaxed);
    let c = &inner.counters;
    for (name, v) in &state.counters {
        match name.as_str() {
            "fuse.requests" => c.requests.fetch_add(*v, Ordering::Relaxed),
            "fuse.errors" => c.errors.fetch_add(*v, Ordering::Relaxed),
            "fuse.panics" => c.panics.fetch_add(*v, Ordering::Relaxed),
            op => {
                c.by_op.add_named(op, *v);
                0
            }
        };
    }
    let l = &inner.lineage;
    l.generation.store(state.generation, Ordering::Relaxed);
    l.restarts.store(state.restarts, Ordering::Relaxed);
    Ok(())
}

/// Adopts the nodes `state` lists, each checked to be the same node
/// here, the root's count now.
fn adopt_listed(inner: &Inner, state: &ServerState) -> VfsResult<()> {
    for n in &state.nodes {
        if inner.nodes.node_id(n.ino) != n.id {
            log::error!(
                "node {} is inode {}, which is node {} here",
                n.id,
                n.ino,
                inner.nodes.node_id(n.ino)
            );
            return Err(Errno::EPROTO);
        }
        if n.id == crate::nodes::ROOT_ID {
            inner.nodes.adopt(&inner.fs.root()?, n.count);
        }
    }
    log::debug!("adopting {} nodes", state.nodes.len());
    inner
        .nodes
        .adopt_all_lazily(state.nodes.iter().map(|n| (n.id, n.count)));
    Ok(())
}

/// A crashed server's state as its journal says (`supervise/`): the
/// nodes with their counts and the open handles (their nodes' I/O modes:
/// `Handoff::backings`).
fn from_journal(inner: &Inner, base: &ServerState, c: &crate::journal::Contents) -> ServerState {
    let mut s = base.clone();
    s.nodes = c
        .nodes
        .iter()
        .filter(|(_, count, _)| *count > 0)
        .map(|(ino, count, _)| super::state::NodeState {
            id: inner.nodes.node_id(*ino),
            ino: *ino,
            count: *count,
        })
        .collect();
    s.handles = c
        .opens
        .iter()
        .map(|(fh, o)| {
            let node = o.backing.map(|_| inner.nodes.node_id(o.ino));
            super::state::HandleState {
                fh: *fh,
                ino: o.ino,
                fs_fh: o.fs_fh,
                writable: o.writable,
                backing_node: node,
                kernel_writer: o.kernel_writer,
                flags: o.flags,
                backing_id: o.backing.flatten(),
            }
        })
        .collect();
    s.next_handle = c.opens.iter().map(|(fh, _)| fh + 1).max().unwrap_or(1);
    s
}
