//! Frames between a server and its successor over a Unix stream socket:
//! a length-prefixed payload, then the frame's descriptors in batches
//! (SCM_RIGHTS carries at most 253 per message; a server with thousands
//! of open files passes thousands).

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Descriptors per SCM_RIGHTS message (the kernel's SCM_MAX_FD is 253).
const FDS_PER_MESSAGE: usize = 200;
/// Largest payload accepted: a state this large is a corrupt length, not
/// a server (a million nodes take tens of megabytes).
const MAX_PAYLOAD: u64 = 8 << 30;

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// Sends one frame: `payload`, then `fds`.
pub(crate) fn send(
    sock: &UnixStream,
    payload: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    send_parts(sock, &[payload], fds)
}

/// Sends one frame whose payload is `parts` one after the other (read
/// back as one by [`recv`]), then `fds`.
pub(crate) fn send_parts(
    sock: &UnixStream,
    parts: &[&[u8]],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut head = [0u8; 12];
    head[..8].copy_from_slice(&(len as u64).to_le_bytes());
    head[8..].copy_from_slice(&(fds.len() as u32).to_le_bytes());
    let mut w = sock;
    w.write_all(&head)?;
    for p in parts {
        w.write_all(p)?;
    }
    for batch in fds.chunks(FDS_PER_MESSAGE) {
        let mut space =
            vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        if !cmsg.push(SendAncillaryMessage::ScmRights(batch)) {
            return Err(bad("descriptor batch too large"));
        }
        let byte = [batch.len() as u8];
        loop {
            match sendmsg(sock, &[IoSlice::new(&byte)], &mut cmsg, SendFlags::NOSIGNAL) {
                Err(rustix::io::Errno::INTR) => continue,
                Ok(1) => break,
                Ok(_) => return Err(bad("short descriptor message")),
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Receives one frame sent by [`send`].
pub(crate) fn recv(sock: &UnixStream) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut head = [0u8; 12];
    let mut r = sock;
    r.read_exact(&mut head)?;
    let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    let nfds = u32::from_le_bytes(head[8..].try_into().expect("4 bytes")) as usize;
    if len > MAX_PAYLOAD {
        return Err(bad("frame length out of range"));
    }
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    let mut fds = Vec::with_capacity(nfds);
    while fds.len() < nfds {
        let mut byte = [0u8; 1];
        let mut space =
            vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FDS_PER_MESSAGE))];
        let mut cmsg = RecvAncillaryBuffer::new(&mut space);
        let n = loop {
            let mut iov = [IoSliceMut::new(&mut byte)];
            match recvmsg(sock, &mut iov, &mut cmsg, RecvFlags::CMSG_CLOEXEC) {
                Err(rustix::io::Errno::INTR) => continue,
                r => break r?.bytes,
            }
        };
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let before = fds.len();
        for m in cmsg.drain() {
            if let RecvAncillaryMessage::ScmRights(got) = m {
                fds.extend(got);
            }
        }
        if fds.len() - before != usize::from(byte[0]) {
            return Err(bad(
                "descriptors lost in transit (the receiver's fd limit?)",
            ));
        }
    }
    Ok((payload, fds))
}

/// Borrows every fd of `v`.
pub(crate) fn borrow_all(v: &[OwnedFd]) -> Vec<BorrowedFd<'_>> {
    v.iter().map(|f| f.as_fd()).collect()
}

/// The socket a parent passed this process as the descriptor number
/// `fd_arg` (`BINARY __takeover FD`, `BINARY __supervise FD`); `peer`
/// names the parent in errors. Made close-on-exec: it is for this process
/// only.
pub(crate) fn inherited_socket(fd_arg: &str, peer: &str) -> std::io::Result<UnixStream> {
    let fd: i32 = fd_arg
        .parse()
        .map_err(|_| bad(&format!("{fd_arg}: not a descriptor number")))?;
    // SAFETY: the parent passed this descriptor open, to this process
    // only, as the argument says; nothing else here owns it (checked to be
    // a socket before use).
    let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let st = rustix::fs::fstat(&owned)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Socket {
        return Err(bad(&format!("descriptor {fd} is not the {peer}'s socket")));
    }
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)?;
    Ok(UnixStream::from(owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn frames_carry_payload_and_many_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        let files: Vec<OwnedFd> = (0..450)
            .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
            .collect();
        let payload: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let t = std::thread::spawn(move || {
            send(&a, &payload, &borrow_all(&files)).unwrap();
            send(&a, b"second", &[]).unwrap();
            payload
        });
        let (got, fds) = recv(&b).unwrap();
        let sent = t.join().unwrap();
        assert_eq!(got, sent);
        assert_eq!(fds.len(), 450);
        assert!(fds.iter().all(|f| f.as_raw_fd() >= 0));
        let (got, fds) = recv(&b).unwrap();
        assert_eq!(got, b"second");
        assert!(fds.is_empty());
    }

    #[test]
    fn a_closed_peer_or_a_garbled_length_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(recv(&b).is_err());
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&[0xff; 12]).unwrap();
        assert_eq!(
            recv(&b).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }
}
