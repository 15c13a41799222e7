//! Answers that several request areas share: an entry handed to the
//! kernel (counted before it leaves, `nodes.rs`), a created open file, an
//! empty answer, an xattr answer sized as the caller asked.

use super::Server;
use crate::convert::{errno, file_attr};
use fuser::{FileHandle, Generation, ReplyCreate, ReplyEmpty, ReplyEntry, ReplyXattr};
use uvfs_vfs::{Attr, Fh, VfsResult, VnodeRef};

impl Server {
    /// Answers with a node handed out as `name` in directory node
    /// `parent`: counts the kernel's new reference first; a node new to
    /// the kernel becomes an eviction candidate (`evict.rs`).
    pub(super) fn reply_entry_at(
        &self,
        reply: ReplyEntry,
        r: VfsResult<(VnodeRef, uvfs_vfs::Attr)>,
        parent: u64,
        name: &[u8],
    ) {
        match r {
            Ok((vp, attr)) => {
                let i = &self.inner;
                let (id, new) = i.nodes.remember_new(&vp);
                let dir = attr.kind == uvfs_vfs::VType::Dir;
                if new {
                    i.note_new(id, parent, name, dir);
                }
                if dir {
                    i.dir_handed_out(id, parent, name);
                }
                reply.entry_with_ttls(
                    &i.attr_ttl(&vp, &attr),
                    &i.name_ttl(&vp),
                    &file_attr(&attr, id),
                    Generation(i.fs.generation(&vp)),
                );
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    /// Answers CREATE and TMPFILE: the new node is remembered by the
    /// kernel (one lookup) and open through a new handle. `named` is the
    /// (parent, name) the evictor may later ask the kernel to forget it by.
    pub(super) fn reply_created(
        &self,
        reply: ReplyCreate,
        r: VfsResult<(VnodeRef, Fh, Attr)>,
        flags: i32,
        named: Option<(u64, &[u8])>,
    ) {
        match r {
            Ok((vp, fh, attr)) => {
                let i = &self.inner;
                let (id, new) = i.nodes.remember_new(&vp);
                if let (true, Some((parent, n))) = (new, named) {
                    i.note_new(id, parent, n, false);
                }
                let generation = Generation(i.fs.generation(&vp));
                let cached = vp.clone();
                // A node new to the kernel has no attributes there to drop.
                let (h, backing) =
                    i.open_file(id, vp, fh, flags, !new, |fd| reply.open_backing(fd));
                // After the open: a file created open for writing on its
                // backing file has its attributes cached for no time
                // (unless empty, see `attr_ttl`); its name for the usual.
                let attr_ttl = &i.attr_ttl(&cached, &attr);
                let name_ttl = &i.name_ttl(&cached);
                let attr = &file_attr(&attr, id);
                let fh = FileHandle(h);
                match backing {
                    Some(b) => {
                        let f = i.kernel_io_flags();
                        reply.created_passthrough_with_ttls(
                            attr_ttl, name_ttl, attr, generation, fh, f, &b,
                        )
                    }
                    None => reply.created_with_ttls(
                        attr_ttl,
                        name_ttl,
                        attr,
                        generation,
                        fh,
                        i.fopen_flags(),
                    ),
                }
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn reply_empty(reply: ReplyEmpty, r: VfsResult<()>) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    pub(super) fn reply_xattr(reply: ReplyXattr, size: u32, r: VfsResult<Vec<u8>>) {
        match r {
            Ok(v) if size == 0 => match u32::try_from(v.len()) {
                Ok(n) => reply.size(n),
                Err(_) => reply.error(fuser::Errno::E2BIG),
            },
            Ok(v) if v.len() > size as usize => reply.error(fuser::Errno::ERANGE),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(e)),
        }
    }
}
