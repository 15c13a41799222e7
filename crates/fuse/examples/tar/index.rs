//! The archive's table of contents, built in one pass at mount and kept
//! compact: a fixed-size [`Node`] per file, a sorted [`Name`] per
//! directory entry, every name and symlink target in one byte arena.
//! File contents stay in the archive, read where [`Node::start`] says.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use tar::EntryType;
use uvfs_vfs::VType;

/// Index of the root directory in [`Index::nodes`].
pub const ROOT: u32 = 0;

/// One file of the archive: what `stat` shows, and where its contents are.
#[derive(Clone, Debug)]
pub struct Node {
    pub parent: u32,
    pub kind: VType,
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
    /// Regular file: where its data starts in the archive. Symlink: where
    /// its target starts in the arena. Directory: its first [`Name`].
    /// Device: its number.
    pub start: u64,
    /// Regular file: its size. Symlink: its target's length. Directory:
    /// how many names it holds.
    pub len: u64,
}

/// One name in a directory. A directory's names are contiguous and
/// sorted, so a lookup is a binary search.
#[derive(Clone, Copy, Debug)]
pub struct Name {
    pub parent: u32,
    pub node: u32,
    off: u32,
    len: u32,
}

pub struct Index {
    pub nodes: Vec<Node>,
    pub names: Vec<Name>,
    arena: Vec<u8>,
}

impl Index {
    /// Reads every header of `archive` (skipping over the data) and
    /// indexes it; parents the archive does not list are made up.
    pub fn build(archive: &File) -> io::Result<Index> {
        let mut b = Builder {
            nodes: vec![dir_node(ROOT, 0o755, 0)],
            children: HashMap::new(),
            arena: Vec::new(),
        };
        let mut ar = tar::Archive::new(archive);
        for entry in ar.entries_with_seek()? {
            let entry = entry?;
            let path = entry.path_bytes().into_owned();
            b.add(&entry, &path).map_err(|e| {
                io::Error::new(e.kind(), format!("{}: {e}", String::from_utf8_lossy(&path)))
            })?;
        }
        b.finish()
    }

    /// The name's bytes.
    pub fn name(&self, n: &Name) -> &[u8] {
        &self.arena[n.off as usize..(n.off + n.len) as usize]
    }

    /// A symlink's target.
    pub fn target(&self, node: &Node) -> &[u8] {
        &self.arena[node.start as usize..(node.start + node.len) as usize]
    }

    /// The names in directory `dir`, sorted.
    pub fn dir(&self, dir: &Node) -> &[Name] {
        &self.names[dir.start as usize..(dir.start + dir.len) as usize]
    }

    /// The node `name` in directory `dir` names.
    pub fn lookup(&self, dir: &Node, name: &[u8]) -> Option<u32> {
        let names = self.dir(dir);
        let i = names.binary_search_by(|n| self.name(n).cmp(name)).ok()?;
        Some(names[i].node)
    }
}

fn dir_node(parent: u32, perm: u16, mtime: i64) -> Node {
    Node {
        parent,
        kind: VType::Dir,
        perm,
        nlink: 2,
        uid: 0,
        gid: 0,
        mtime,
        start: 0,
        len: 0,
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The state of the one pass. `children` maps (directory, name) to node;
/// it is what the pass needs to find parents and hard-link targets, and
/// is turned into the sorted [`Name`] array at the end.
struct Builder {
    nodes: Vec<Node>,
    children: HashMap<(u32, Box<[u8]>), u32>,
    arena: Vec<u8>,
}

impl Builder {
    fn add(&mut self, entry: &tar::Entry<'_, &File>, path: &[u8]) -> io::Result<()> {
        let h = entry.header();
        let kind = match h.entry_type() {
            EntryType::Regular | EntryType::Continuous => VType::Reg,
            EntryType::Directory => VType::Dir,
            EntryType::Symlink => VType::Lnk,
            EntryType::Char => VType::Chr,
            EntryType::Block => VType::Blk,
            EntryType::Fifo => VType::Fifo,
            EntryType::Link => return self.add_hard_link(entry, path),
            EntryType::XGlobalHeader => return Ok(()),
            other => return Err(invalid(format!("unsupported entry type {other:?}"))),
        };
        let id = |v: u64| u32::try_from(v).map_err(|_| invalid(format!("id {v} too large")));
        let mut node = Node {
            parent: ROOT,
            kind,
            perm: (h.mode()? & 0o7777) as u16,
            nlink: if kind == VType::Dir { 2 } else { 1 },
            uid: id(h.uid()?)?,
            gid: id(h.gid()?)?,
            mtime: h.mtime()?.try_into().unwrap_or(i64::MAX),
            start: 0,
            len: 0,
        };
        match kind {
            VType::Reg => (node.start, node.len) = (entry.raw_file_position(), entry.size()),
            VType::Lnk => {
                let target = entry.link_name_bytes().unwrap_or_default();
                node.start = self.arena.len() as u64;
                node.len = target.len() as u64;
                self.arena.extend_from_slice(&target);
            }
            VType::Chr | VType::Blk => {
                let (major, minor) = (h.device_major()?, h.device_minor()?);
                node.start = libc::makedev(major.unwrap_or(0), minor.unwrap_or(0));
            }
            _ => {}
        }
        let Some((parent, name)) = self.parent_of(path, node.mtime)? else {
            // The archive lists the root itself ("./"): keep its attributes.
            if kind != VType::Dir {
                return Err(invalid("the root must be a directory".into()));
            }
            let root = &mut self.nodes[ROOT as usize];
            (root.perm, root.uid, root.gid, root.mtime) =
                (node.perm, node.uid, node.gid, node.mtime);
            return Ok(());
        };
        node.parent = parent;
        let key = (parent, Box::from(name));
        if let Some(&old) = self.children.get(&key) {
            let old = &mut self.nodes[old as usize];
            if old.kind == VType::Dir && kind == VType::Dir {
                // A directory listed after its contents (or twice): keep
                // what it holds, take the listed attributes.
                (old.perm, old.uid, old.gid, old.mtime) =
                    (node.perm, node.uid, node.gid, node.mtime);
                return Ok(());
            }
        }
        // A later entry of the same name replaces the earlier, as on
        // extraction.
        let n = self.push(node)?;
        self.children.insert(key, n);
        Ok(())
    }

    /// A hard link is one more name for the node its target names.
    fn add_hard_link(&mut self, entry: &tar::Entry<'_, &File>, path: &[u8]) -> io::Result<()> {
        let target = entry.link_name_bytes().unwrap_or_default();
        let node = self
            .resolve(&target)
            .filter(|&n| self.nodes[n as usize].kind != VType::Dir)
            .ok_or_else(|| {
                invalid(format!(
                    "hard link to {}, which is not an earlier file",
                    String::from_utf8_lossy(&target)
                ))
            })?;
        let mtime = self.nodes[node as usize].mtime;
        let (parent, name) = self
            .parent_of(path, mtime)?
            .ok_or_else(|| invalid("a hard link cannot be the root".into()))?;
        let links = &mut self.nodes[node as usize].nlink;
        *links = links.saturating_add(1);
        self.children.insert((parent, Box::from(name)), node);
        Ok(())
    }

    /// The directory that holds `path`'s last component, made (with its
    /// own missing parents) if the archive has not listed it, and that
    /// component; None for the root.
    fn parent_of<'p>(&mut self, path: &'p [u8], mtime: i64) -> io::Result<Option<(u32, &'p [u8])>> {
        let mut parts = components(path)?;
        let Some(last) = parts.pop() else {
            return Ok(None);
        };
        let mut dir = ROOT;
        for part in parts {
            dir = match self.children.get(&(dir, Box::from(part))) {
                Some(&n) if self.nodes[n as usize].kind == VType::Dir => n,
                Some(_) => return Err(invalid("a parent is not a directory".into())),
                None => {
                    let n = self.push(dir_node(dir, 0o755, mtime))?;
                    self.children.insert((dir, Box::from(part)), n);
                    n
                }
            };
        }
        Ok(Some((dir, last)))
    }

    fn resolve(&self, path: &[u8]) -> Option<u32> {
        components(path).ok()?.iter().try_fold(ROOT, |dir, part| {
            self.children.get(&(dir, Box::from(*part))).copied()
        })
    }

    fn push(&mut self, node: Node) -> io::Result<u32> {
        let n = u32::try_from(self.nodes.len()).map_err(|_| invalid("too many entries".into()))?;
        self.nodes.push(node);
        Ok(n)
    }

    /// Moves the names into the arena, sorts them by directory then name,
    /// and points each directory at its run of names.
    fn finish(self) -> io::Result<Index> {
        let Builder {
            mut nodes,
            children,
            mut arena,
        } = self;
        let mut names = Vec::with_capacity(children.len());
        for ((parent, name), node) in children {
            let off = arena.len() as u32;
            arena.extend_from_slice(&name);
            // Offsets and ends of names must fit the u32s of a `Name`.
            if u32::try_from(arena.len()).is_err() {
                return Err(invalid("names too long".into()));
            }
            names.push(Name {
                parent,
                node,
                off,
                len: name.len() as u32,
            });
        }
        arena.shrink_to_fit();
        let key = |n: &Name| (n.parent, &arena[n.off as usize..(n.off + n.len) as usize]);
        names.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
        for (i, n) in names.iter().enumerate() {
            let subdir = nodes[n.node as usize].kind == VType::Dir;
            let dir = &mut nodes[n.parent as usize];
            if dir.len == 0 {
                dir.start = i as u64;
            }
            dir.len += 1;
            dir.nlink += u32::from(subdir);
        }
        Ok(Index {
            nodes,
            names,
            arena,
        })
    }
}

/// The names along `path`, without empty and `.` components; `..` is
/// refused, as it would lead out of the archive.
fn components(path: &[u8]) -> io::Result<Vec<&[u8]>> {
    let parts: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .collect();
    if parts.iter().any(|p| *p == b"..") {
        return Err(invalid("path with \"..\"".into()));
    }
    Ok(parts)
}
