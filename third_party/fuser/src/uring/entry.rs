//! A ring entry's buffers, in a memfd of their own.
//!
//! The kernel keeps the user addresses an entry was registered with and
//! copies requests and replies there in whichever process answers the
//! entry. A successor of a live upgrade maps the same memfd at the same
//! address (`Entry::adopt`), so it can answer what an entry of its
//! predecessor holds, and the entry goes on serving in its ring.

use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::fd::OwnedFd;
use std::sync::atomic::{Ordering, fence};

/// The kernel's mark of a resent request's id (`FUSE_UNIQUE_RESEND`).
pub(super) const UNIQUE_RESEND: u64 = 1 << 63;

/// `struct fuse_uring_req_header`: `in_out[128]`, `op_in[128]`,
/// `struct fuse_uring_ent_in_out` (flags, commit_id, payload_sz, ...).
pub(super) const HEADER_SIZE: usize = 288;
const OP_IN: usize = 128;
pub(super) const OP_IN_SIZE: usize = 128;
pub(super) const COMMIT_ID: usize = 256 + 8;
pub(super) const PAYLOAD_SZ: usize = 256 + 16;
/// `struct fuse_in_header` and `struct fuse_out_header`.
pub(super) const IN_HEADER: usize = 40;
pub(super) const OUT_HEADER: usize = 16;
/// The header buffer's page; the payload follows it.
const HEADER_PAGE: usize = 4096;
/// Where in the header page (past the 288 bytes the kernel reads and
/// writes) the entry's `State` is kept, for a server started after this
/// one dies (`recover.rs`).
const STATE_AT: usize = 2048;

/// What an entry's buffers hold, as its server last said: a server that
/// dies leaves this behind in the memfd, and the next one (`recover.rs`)
/// reads it (with the header) to tell a request still to answer from a
/// reply written, or half written, or nothing owed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum State {
    /// Never handed to the kernel (or from a build without states).
    New = 0,
    /// The kernel put a request in it; no reply written yet.
    Request = 1,
    /// A reply is being written over the request: neither is whole.
    Replying = 2,
    /// A whole reply is written; its commit may or may not have reached
    /// the kernel (committing it again is refused, harmlessly, if it did).
    Replied = 3,
}

/// One entry's buffers, shared with the kernel (see the module docs of
/// `uring` for who may touch them when).
pub(super) struct Entry {
    header: *mut u8,
    payload: *mut u8,
    payload_size: usize,
    map_len: usize,
    memfd: OwnedFd,
    /// The REGISTER command's iovecs (header, payload); read by the kernel
    /// when it takes the command.
    pub(super) iov: Box<[libc::iovec; 2]>,
}

// SAFETY: the buffers are plain bytes in a mapping owned by the entry; the
// ownership protocol in `uring`'s module docs makes their users take turns.
unsafe impl Send for Entry {}
// SAFETY: as above; shared references only pass the pointers around.
unsafe impl Sync for Entry {}

fn map_len(payload_size: usize) -> usize {
    HEADER_PAGE + payload_size.div_ceil(HEADER_PAGE) * HEADER_PAGE
}

impl Entry {
    /// New buffers for a payload of `payload_size` bytes. Untouched pages
    /// of the memfd cost no memory.
    pub(super) fn new(payload_size: usize) -> io::Result<Entry> {
        let len = map_len(payload_size);
        let memfd = nix::sys::memfd::memfd_create(
            c"fuse-uring-entry",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )?;
        nix::unistd::ftruncate(&memfd, len as libc::off_t)?;
        Self::map(memfd, payload_size, std::ptr::null_mut(), 0)
    }

    /// The entry of another process whose buffers are `memfd`, mapped at
    /// `addr` there: mapped at the same address here (the kernel copies
    /// to and from that address). Fails if something else is mapped
    /// there, or the memfd is not an entry of this payload size.
    pub(super) fn adopt(memfd: OwnedFd, addr: u64, payload_size: usize) -> io::Result<Entry> {
        let len = map_len(payload_size);
        // SAFETY: fstat fills a zeroed stat struct of a descriptor we own.
        let size = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(memfd.as_raw_fd(), &mut st) != 0 {
                return Err(io::Error::last_os_error());
            }
            st.st_size as usize
        };
        if size != len || addr == 0 || addr % HEADER_PAGE as u64 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a ring entry of {size} bytes at {addr:#x}, {len} expected"),
            ));
        }
        Self::map(memfd, payload_size, addr as *mut libc::c_void, libc::MAP_FIXED_NOREPLACE)
    }

    fn map(
        memfd: OwnedFd,
        payload_size: usize,
        at: *mut libc::c_void,
        flags: libc::c_int,
    ) -> io::Result<Entry> {
        let len = map_len(payload_size);
        // SAFETY: maps `len` bytes of our memfd, which is that long; with
        // MAP_FIXED_NOREPLACE the kernel refuses rather than replace any
        // mapping at `at`.
        let p = unsafe {
            libc::mmap(
                at,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | flags,
                memfd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("mapping a ring entry at {at:p}: {e}"),
            ));
        }
        if !at.is_null() && p != at {
            // An old kernel that took the flag for a hint.
            // SAFETY: unmaps the mapping just made.
            unsafe { libc::munmap(p, len) };
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("a ring entry's address {at:p} is taken in this process"),
            ));
        }
        let header = p.cast::<u8>();
        // Inside the mapping: HEADER_PAGE < len.
        let payload = header.wrapping_add(HEADER_PAGE);
        let iov = Box::new([
            libc::iovec {
                iov_base: header.cast(),
                iov_len: HEADER_SIZE,
            },
            libc::iovec {
                iov_base: payload.cast(),
                iov_len: payload_size,
            },
        ]);
        Ok(Entry {
            header,
            payload,
            payload_size,
            map_len: len,
            memfd,
            iov,
        })
    }

    /// Where the buffers are mapped, which a successor maps too.
    pub(super) fn addr(&self) -> u64 {
        self.header as u64
    }

    /// A descriptor of the buffers' memfd, for a successor.
    pub(super) fn dup_memfd(&self) -> io::Result<OwnedFd> {
        self.memfd.try_clone()
    }

    /// The payload's size, as mapped.
    pub(super) fn payload_size(&self) -> usize {
        self.payload_size
    }

    /// The buffers' memfd, for a keeper.
    pub(super) fn memfd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.memfd)
    }

    fn state_word(&self) -> &std::sync::atomic::AtomicU32 {
        // SAFETY: STATE_AT + 4 <= HEADER_PAGE, inside the mapped header
        // page, 4-aligned (the page is); the kernel never touches bytes
        // past HEADER_SIZE, and every access to the word is atomic.
        unsafe { &*self.header.add(STATE_AT).cast::<std::sync::atomic::AtomicU32>() }
    }

    /// What the buffers hold, as the last server to serve the entry said.
    pub(super) fn state(&self) -> State {
        match self.state_word().load(Ordering::Acquire) {
            1 => State::Request,
            2 => State::Replying,
            3 => State::Replied,
            _ => State::New,
        }
    }

    pub(super) fn set_state(&self, s: State) {
        self.state_word().store(s as u32, Ordering::Release);
    }

    pub(super) fn read_u32(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.read_header(at))
    }

    pub(super) fn read_u64(&self, at: usize) -> u64 {
        u64::from_ne_bytes(self.read_header(at))
    }

    /// `N` bytes of the header page from offset `at`.
    fn read_header<const N: usize>(&self, at: usize) -> [u8; N] {
        assert!(at + N <= HEADER_SIZE, "header read out of bounds");
        let mut b = [0u8; N];
        // SAFETY: `at + N <= HEADER_SIZE` (asserted), inside the mapped
        // header page; the caller owns the entry (module docs).
        unsafe { std::ptr::copy_nonoverlapping(self.header.add(at), b.as_mut_ptr(), N) };
        b
    }

    /// Writes `b` into the header page at `at`.
    pub(super) fn write_header(&self, at: usize, b: &[u8]) {
        assert!(at + b.len() <= HEADER_SIZE, "header write out of bounds");
        // SAFETY: in bounds of the mapped header page (asserted); `b` is
        // caller memory, never an entry's; the caller owns the entry.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.header.add(at), b.len()) };
    }

    /// The request the kernel put in this entry, in the layout a read of
    /// /dev/fuse gives (header, fixed argument, the rest), appended to
    /// `out`. None if the sizes do not add up.
    pub(super) fn copy_request(&self, out: &mut Vec<u8>) -> Option<()> {
        let len = self.read_u32(0) as usize;
        let payload = self.read_u32(PAYLOAD_SZ) as usize;
        let arg0 = len.checked_sub(IN_HEADER)?.checked_sub(payload)?;
        if arg0 > OP_IN_SIZE || payload > self.payload_size {
            return None;
        }
        // SAFETY: the ranges lie within the header and payload buffers
        // (checked above) and the queue thread owns the entry now.
        unsafe {
            out.extend_from_slice(std::slice::from_raw_parts(self.header, IN_HEADER));
            out.extend_from_slice(std::slice::from_raw_parts(self.header.add(OP_IN), arg0));
            out.extend_from_slice(std::slice::from_raw_parts(self.payload, payload));
        }
        Some(())
    }

    /// Checks that a reply of `total` bytes fits.
    pub(super) fn fits(&self, total: usize) -> io::Result<()> {
        if total < OUT_HEADER || total - OUT_HEADER > self.payload_size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a {total}-byte reply does not fit the ring entry"),
            ));
        }
        Ok(())
    }

    /// Writes a reply (`struct fuse_out_header` first) into the buffers.
    pub(super) fn write_reply(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let total: usize = data.iter().map(|d| d.len()).sum();
        self.fits(total)?;
        // Marked before the first byte lands: a server started after this
        // one dies mid-copy must not take the mix for a request.
        self.set_state(State::Replying);
        fence(Ordering::Release);
        let mut at = 0usize;
        for d in data {
            let mut rest = &d[..];
            while !rest.is_empty() {
                // In bounds: at < OUT_HEADER <= HEADER_SIZE in the header,
                // at - OUT_HEADER < total - OUT_HEADER <= payload_size in
                // the payload.
                let (dst, room) = if at < OUT_HEADER {
                    (self.header.wrapping_add(at), OUT_HEADER - at)
                } else {
                    (self.payload.wrapping_add(at - OUT_HEADER), total - at)
                };
                let n = room.min(rest.len());
                // SAFETY: `dst` is inside its mapped buffer (above) with
                // `room >= n` bytes left; `rest` is caller memory, never an
                // entry's.
                unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), dst, n) };
                at += n;
                rest = &rest[n..];
            }
        }
        self.write_header(PAYLOAD_SZ, &((total - OUT_HEADER) as u32).to_ne_bytes());
        // A request served again after a crash carries the resend mark in
        // its id (`recover.rs`), which the kernel's copy of it lacks: a
        // reply naming the marked id would be refused.
        let unique = self.read_u64(8) & !UNIQUE_RESEND;
        self.write_header(8, &unique.to_ne_bytes());
        self.set_state(State::Replied);
        Ok(())
    }

    /// Writes a reply of just an error into the buffers, for request
    /// `unique`.
    pub(super) fn write_error(&self, errno: i32, unique: u64) {
        let mut h = [0u8; OUT_HEADER];
        h[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&(-errno).to_ne_bytes());
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        // Fits: the header alone, no payload.
        let _ = self.write_reply(&[IoSlice::new(&h)]);
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // SAFETY: mapped in `map` with this length. Entries are dropped only
        // once the kernel let go of them (the queue thread drops its table
        // after the last completion; a late reply holds an Arc), or once a
        // successor holds them through its own mapping.
        unsafe { libc::munmap(self.header.cast(), self.map_len) };
    }
}
