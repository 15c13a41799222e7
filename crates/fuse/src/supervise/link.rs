//! The server's side of its supervisor: starts it (or links to the one a
//! predecessor had), gives it what a server started after a crash needs,
//! and keeps the journal it holds current.

use super::frame;
use crate::journal::Journal;
use crate::server::Inner;
use crate::upgrade::{kept_ring, wire};
use parking_lot::Mutex;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use uvfs_vfs::FdKeeper;

/// A server's link to its supervisor.
pub struct Link {
    tx: Arc<Tx>,
    journal: Arc<Journal>,
}

/// The socket, one frame at a time: frames are several writes, sent from
/// any thread (journal tables, kept descriptors).
struct Tx(Mutex<UnixStream>);

impl Tx {
    fn send(&self, payload: &[u8], fds: &[std::os::fd::BorrowedFd<'_>]) -> std::io::Result<()> {
        wire::send(&self.0.lock(), payload, fds)
    }
}

impl FdKeeper for Tx {
    fn keep(&self, key: u64, meta: &[u8], fd: std::os::fd::BorrowedFd<'_>) {
        let mut b = Vec::with_capacity(9 + meta.len());
        b.push(frame::KEEP);
        b.extend_from_slice(&key.to_le_bytes());
        b.extend_from_slice(meta);
        if let Err(e) = self.send(&b, &[fd]) {
            log::warn!("the supervisor could not be given a descriptor to keep: {e}");
        }
    }

    fn forget(&self, key: u64) {
        let mut b = [0u8; 9];
        b[0] = frame::FORGET;
        b[1..].copy_from_slice(&key.to_le_bytes());
        let sock = self.0.lock();
        // Answered once the supervisor closed its duplicate: a lock on it
        // is gone when this returns.
        let r = wire::send(&sock, &b, &[]).and_then(|()| {
            let mut ack = [0u8; 1];
            let mut r = &*sock;
            std::io::Read::read_exact(&mut r, &mut ack)?;
            match ack[0] {
                frame::ACK => Ok(()),
                _ => Err(std::io::Error::other("unexpected answer")),
            }
        });
        if let Err(e) = r {
            log::warn!("the supervisor could not close a kept descriptor: {e}");
        }
    }
}

impl fuser::RingKeeper for Tx {
    fn keep(&self, qid: u16, addr: u64, memfd: std::os::fd::BorrowedFd<'_>) {
        FdKeeper::keep(
            self,
            kept_ring::key(addr),
            &kept_ring::meta(qid, addr),
            memfd,
        );
    }

    fn forget(&self, _qid: u16, addr: u64) {
        FdKeeper::forget(self, kept_ring::key(addr));
    }
}

impl Link {
    /// Starts a supervisor from `exe` for the mount `inner` serves (or
    /// links to `existing`, a predecessor's), tells it the server's base
    /// state (`hello`: what a successor needs besides the journal, with
    /// the connection's descriptor) and starts journaling: in a new
    /// journal, or in `resumed`, the journal of a crashed predecessor this
    /// server was rebuilt from (already what this server holds).
    pub(crate) fn start(
        inner: &Arc<Inner>,
        exe: &std::path::Path,
        hello: Vec<u8>,
        fds: Vec<OwnedFd>,
        existing: Option<OwnedFd>,
        resumed: Option<crate::journal::Resumable>,
    ) -> std::io::Result<Link> {
        let sock = match existing {
            Some(fd) => UnixStream::from(fd),
            None => spawn(exe)?,
        };
        let tx = Arc::new(Tx(Mutex::new(sock)));
        log::debug!(
            "hello to the supervisor: {} bytes, {} descriptors",
            hello.len(),
            fds.len()
        );
        tx.send(&hello, &wire::borrow_all(&fds))?;
        let t = tx.clone();
        let publish: crate::journal::Publish = Box::new(move |fd| t.send(&[frame::TABLE], &[fd]));
        let fill = resumed.is_none();
        let journal = Arc::new(match resumed {
            Some(r) => Journal::resume(publish, r)?,
            None => Journal::new(publish)?,
        });
        let fs = Arc::downgrade(&inner.fs);
        journal.set_recorder(Box::new(move |ino, vp| {
            fs.upgrade()?.journal_record(ino, vp)
        }));
        // Before requests are served: every count and open so far.
        inner.nodes.attach_journal(journal.clone(), fill);
        inner.handles.attach_journal(journal.clone(), fill);
        // Descriptors holding locks, those held now first (`kept_all`
        // then says what a predecessor, or a crashed one, kept is done
        // with).
        inner.fs.keep_fds_with(tx.clone());
        Ok(Link { tx, journal })
    }

    /// Says the server kept all it holds (its file system's descriptors,
    /// its ring entries): what a predecessor kept is done with.
    pub(crate) fn kept_all(&self) -> std::io::Result<()> {
        self.tx.send(&[frame::KEPT_ALL], &[])
    }

    /// Where the io_uring queues keep their entries (`fuser::RingKeeper`).
    pub(crate) fn ring_keeper(&self) -> Arc<dyn fuser::RingKeeper> {
        self.tx.clone()
    }

    /// The journal.
    pub fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// Gives the supervisor descriptors of the request loops' clones of
    /// the connection, so the requests they hold survive this process
    /// (`FUSE_NOTIFY_RESEND` gives them to the next server).
    pub fn clones(&self, fds: &[OwnedFd]) -> std::io::Result<()> {
        self.tx.send(&[frame::CLONES], &wire::borrow_all(fds))
    }

    /// Says this server leaves on purpose (the mount is gone or a
    /// successor linked): the supervisor ends.
    pub fn bye(&self) {
        let _ = self.tx.send(&[frame::BYE], &[]);
    }

    /// A descriptor of the link, for a successor.
    pub(crate) fn dup(&self) -> std::io::Result<OwnedFd> {
        self.tx.0.lock().as_fd().try_clone_to_owned()
    }
}

/// Starts `exe __supervise FD`; returns this side of the socket.
fn spawn(exe: &std::path::Path) -> std::io::Result<UnixStream> {
    let (mine, theirs) = UnixStream::pair()?;
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())?;
    let r = Command::new(exe)
        .arg(super::SUPERVISE_ARG)
        .arg(theirs.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn();
    drop(theirs);
    r.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("starting the supervisor {}: {e}", exe.display()),
        )
    })?;
    Ok(mine)
}
