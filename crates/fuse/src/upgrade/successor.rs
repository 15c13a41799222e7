//! The taking side of a live upgrade: a process started as
//! `BINARY __takeover FD` receives the state on FD, and the program
//! (the CLI) rebuilds its file system from it and serves the connection
//! with `serve_successor` (`mount.rs`).

use super::state::{monotonic_ns, ServerState, VERSION};
use super::wire;
use crate::handles::OpenFile;
use crate::server::Inner;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uvfs_vfs::{Errno, Saved, VfsResult};

/// What a successor received from the server it replaces.
pub struct Handoff {
    sock: UnixStream,
    pub(crate) state: ServerState,
    pub(crate) dev: Option<OwnedFd>,
    fs: Option<Saved>,
}

fn invalid(why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.into())
}

/// In a process started as `BINARY __takeover FD`: says hello on FD,
/// receives the predecessor's state, and returns it (the predecessor
/// waits meanwhile, its requests parked).
pub fn receive(fd_arg: &str) -> std::io::Result<Handoff> {
    let fd: i32 = fd_arg
        .parse()
        .map_err(|_| invalid(format!("{fd_arg}: not a descriptor number")))?;
    // SAFETY: the predecessor passed this descriptor open, to this process
    // only, as the argument says; nothing else here owns it (it is
    // checked to be a socket before use).
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let st = rustix::fs::fstat(&owned)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(invalid(format!(
            "descriptor {fd} is not the predecessor's socket"
        )));
    }
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)?;
    let sock = UnixStream::from(owned);
    let hello = serde_json::json!({
        "state_version": VERSION,
        "pid": std::process::id(),
    });
    wire::send(&sock, hello.to_string().as_bytes(), &[])?;
    let (bytes, mut fds) = wire::recv(&sock)?;
    let mut state = match ServerState::decode(&bytes) {
        Ok(s) => s,
        Err(e) => {
            let _ = reply(&sock, serde_json::json!({ "error": e.to_string() }));
            return Err(e);
        }
    };
    if fds.len() != 1 + state.fs_fds as usize {
        return Err(invalid(format!(
            "{} descriptors received, {} expected",
            fds.len(),
            1 + state.fs_fds
        )));
    }
    let fs_fds = fds.split_off(1);
    let dev = fds.pop();
    let fs = Saved {
        format: state.fs_format.clone(),
        bytes: std::mem::take(&mut state.fs_bytes),
        fds: fs_fds,
    };
    Ok(Handoff {
        sock,
        state,
        dev,
        fs: Some(fs),
    })
}

fn reply(sock: &UnixStream, v: serde_json::Value) -> std::io::Result<()> {
    wire::send(sock, v.to_string().as_bytes(), &[])
}

impl Handoff {
    /// The program's own state (`Successor::app`).
    pub fn app(&self) -> &[u8] {
        &self.state.app
    }

    /// The file system's state, for its restore constructor (once).
    pub fn take_fs(&mut self) -> Option<Saved> {
        self.fs.take()
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

    pub(crate) fn backings(&self) -> Vec<(u64, Option<u32>, u64)> {
        self.state.backings.clone()
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
    let state = &handoff.state;
    let vget = |ino: u64| -> VfsResult<uvfs_vfs::VnodeRef> {
        let root = inner.fs.root()?;
        if root.ino() == ino {
            return Ok(root);
        }
        inner.fs.vget(ino)
    };
    // Nodes are found when the kernel names them (`nodes.rs`, "Adopted
    // nodes"); the root now.
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
        } else {
            inner.nodes.adopt_lazily(n.id, n.count);
        }
    }
    let fs = Arc::downgrade(&inner.fs);
    inner.nodes.set_resolver(Box::new(move |ino| {
        fs.upgrade().ok_or(Errno::ESTALE)?.vget(ino)
    }));
    for h in &state.handles {
        let vp =
            vget(h.ino).inspect_err(|e| log::error!("handle {} (inode {}): {e}", h.fh, h.ino))?;
        if h.kernel_writer {
            if let Some(node) = h.backing_node {
                inner.backings.writers.opened(node);
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
            },
            state.next_handle,
        );
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
