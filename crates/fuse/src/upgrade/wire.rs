//! Frames between a server and its successor over a Unix stream socket:
//! a length-prefixed payload, then the frame's descriptors in batches
//! (SCM_RIGHTS carries at most 253 per message; a server with thousands
//! of open files passes thousands).
//!
//! A large payload (a live upgrade's state: tens of megabytes at a million
//! nodes) may travel in a sealed memfd passed as the frame's first
//! descriptor instead ([`send_parts_sealed`]): through the socket it goes
//! a socket buffer at a time, each one a wake-up of the reader and of the
//! writer, all while the mount's requests wait; in a memfd it is written
//! once and read once. [`recv`] takes either.

use bytes::Bytes;
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
/// Set in a frame's descriptor count: the payload is in the first
/// descriptor, a memfd sealed against every change, not on the socket.
const IN_MEMFD: u32 = 1 << 31;
/// Payloads from which [`send_parts_sealed`] pays: below it the memfd's
/// own calls cost more than the socket's few buffers.
pub(crate) const SEALED_FROM: usize = 1 << 20;

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
    let mut w = sock;
    w.write_all(&head(len, fds.len() as u32))?;
    for p in parts {
        w.write_all(p)?;
    }
    send_fds(sock, fds)
}

/// Sends one frame as [`send_parts`] does, its payload in a memfd sealed
/// against writes, growth and shrinking once written (so what the
/// receiver reads is what was sent). Only to a receiver that said it
/// reads such frames: an older [`recv`] would take the flag for a count.
pub(crate) fn send_parts_sealed(
    sock: &UnixStream,
    parts: &[&[u8]],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let memfd = rustix::fs::memfd_create(
        "uvfs-frame",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    // Sized first: the pages come in one call, not one write at a time.
    rustix::fs::fallocate(&memfd, rustix::fs::FallocateFlags::empty(), 0, len as u64)?;
    let mut file = std::fs::File::from(memfd);
    for p in parts {
        file.write_all(p)?;
    }
    let memfd = OwnedFd::from(file);
    rustix::fs::fcntl_add_seals(
        &memfd,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    let mut all = Vec::with_capacity(fds.len() + 1);
    all.push(memfd.as_fd());
    all.extend_from_slice(fds);
    let mut w = sock;
    w.write_all(&head(len, all.len() as u32 | IN_MEMFD))?;
    send_fds(sock, &all)
}

/// A frame's head: the payload's length, then the descriptor count and
/// flags.
fn head(len: usize, count: u32) -> [u8; 12] {
    let mut head = [0u8; 12];
    head[..8].copy_from_slice(&(len as u64).to_le_bytes());
    head[8..].copy_from_slice(&count.to_le_bytes());
    head
}

/// Sends `fds` in batches, after a frame's head and payload.
fn send_fds(sock: &UnixStream, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
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

/// Receives one frame sent by [`send`], [`send_parts`] or
/// [`send_parts_sealed`].
pub(crate) fn recv(sock: &UnixStream) -> std::io::Result<(Bytes, Vec<OwnedFd>)> {
    let mut head = [0u8; 12];
    let mut r = sock;
    r.read_exact(&mut head)?;
    let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    let count = u32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
    let in_memfd = count & IN_MEMFD != 0;
    let nfds = (count & !IN_MEMFD) as usize;
    if len > MAX_PAYLOAD {
        return Err(bad("frame length out of range"));
    }
    if in_memfd && nfds == 0 {
        return Err(bad("a frame in a memfd without the memfd"));
    }
    let mut payload = if in_memfd {
        Bytes::new()
    } else {
        let mut payload = vec![0u8; len as usize];
        r.read_exact(&mut payload)?;
        Bytes::from(payload)
    };
    let mut fds = recv_fds(sock, nfds)?;
    if in_memfd {
        payload = map_sealed(fds.remove(0), len)?;
    }
    Ok((payload, fds))
}

/// The payload of a frame sent by [`send_parts_sealed`]: `len` bytes of
/// `memfd`, which must be sealed against change and of that size, mapped
/// where it is: its pages are the sender's, shared, where a copy of tens
/// of megabytes would be made while requests wait.
fn map_sealed(memfd: OwnedFd, len: u64) -> std::io::Result<Bytes> {
    use rustix::fs::SealFlags;
    let sealed = SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK;
    if !rustix::fs::fcntl_get_seals(&memfd)?.contains(sealed) {
        return Err(bad("a frame's memfd is not sealed"));
    }
    if rustix::fs::fstat(&memfd)?.st_size as u64 != len {
        return Err(bad("a frame's memfd is not of the frame's length"));
    }
    if len == 0 {
        return Ok(Bytes::new());
    }
    let file = std::fs::File::from(memfd);
    // SAFETY: a mapping's bytes may change under the slices made of it
    // only if the file can be written or shrunk; this memfd is sealed
    // against writes (which covers writable shared mappings: the seal is
    // refused while one exists), growth and shrinking, checked above, and
    // seals cannot be removed. Its length is `len`, checked too.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .len(len as usize)
            .populate()
            .map(&file)?
    };
    Ok(Bytes::from_owner(map))
}

/// Receives `nfds` descriptors sent by [`send_fds`].
fn recv_fds(sock: &UnixStream, nfds: usize) -> std::io::Result<Vec<OwnedFd>> {
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
    Ok(fds)
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
        assert_eq!(&got[..], b"second");
        assert!(fds.is_empty());
    }

    #[test]
    fn a_sealed_frame_carries_its_payload_in_a_memfd_beside_the_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        let files: Vec<OwnedFd> = (0..300)
            .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
            .collect();
        let head: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let body: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7) as u8).collect();
        let sent = [head.clone(), body.clone()].concat();
        let t = std::thread::spawn(move || {
            send_parts_sealed(&a, &[&head, &body], &borrow_all(&files)).unwrap();
            send(&a, b"after", &[]).unwrap();
        });
        let (got, fds) = recv(&b).unwrap();
        t.join().unwrap();
        assert_eq!(got, sent);
        assert_eq!(fds.len(), 300, "the memfd is not one of the frame's fds");
        let (got, fds) = recv(&b).unwrap();
        assert_eq!(&got[..], b"after");
        assert!(fds.is_empty());
    }

    #[test]
    fn a_memfd_frame_that_is_unsealed_or_of_another_length_is_refused() {
        use rustix::fs::{MemfdFlags, SealFlags};
        let frame = |seals: SealFlags, size: u64, len: usize| {
            let (a, b) = UnixStream::pair().unwrap();
            let m = rustix::fs::memfd_create("t", MemfdFlags::ALLOW_SEALING).unwrap();
            rustix::fs::ftruncate(&m, size).unwrap();
            rustix::fs::fcntl_add_seals(&m, seals).unwrap();
            (&a).write_all(&head(len, 1 | IN_MEMFD)).unwrap();
            send_fds(&a, &[m.as_fd()]).unwrap();
            recv(&b).map(|(p, _)| p.len())
        };
        let all = SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK;
        assert_eq!(frame(all, 10, 10).unwrap(), 10);
        let unsealed = frame(SealFlags::GROW | SealFlags::SHRINK, 10, 10).unwrap_err();
        assert_eq!(unsealed.kind(), std::io::ErrorKind::InvalidData);
        let short = frame(all, 10, 20).unwrap_err();
        assert_eq!(short.kind(), std::io::ErrorKind::InvalidData);
        // The flag with no descriptor at all.
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&head(10, IN_MEMFD)).unwrap();
        assert_eq!(
            recv(&b).unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
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
