//! FUSE over io_uring (Linux 6.14+, with the `fuse` module's
//! `enable_uring` parameter on).
//!
//! Why: a request read from /dev/fuse wakes whichever server thread has
//! waited longest, wherever it runs, and its reply wakes the caller from
//! there: two cross-CPU wakeups per round trip, each of which may have to
//! bring a halted CPU (a vCPU, in a guest) back up, and which together
//! cost several times the request's own work. With io_uring the kernel
//! queues each request on the queue of the CPU its caller runs on; that
//! queue's thread here is pinned to the same CPU, so both wakeups stay on
//! it. (docs/results.md, "FUSE over io_uring", has the round-trip times.)
//!
//! # Protocol (include/uapi/linux/fuse.h, fs/fuse/dev_uring.c)
//!
//! Each queue thread owns a ring (128-byte SQEs) and registers *entries*
//! on `/dev/fuse` with `FUSE_IO_URING_CMD_REGISTER`: a 288-byte header
//! buffer (`in_out`: the in/out header; `op_in`: the opcode's fixed
//! argument; `ring_ent_in_out`: commit id and payload size) and a payload
//! buffer. The command completes when the kernel has put a request in the
//! entry; the reply is written into the same buffers and handed back with
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also waits for the next
//! request. The kernel switches the connection to the rings only once
//! every CPU's queue has an entry; until then (or if a queue cannot be
//! set up) requests keep coming through /dev/fuse. FORGETs, INTERRUPTs and
//! notifications always use /dev/fuse, so the classic loops keep running.
//!
//! # Who touches an entry's buffers
//!
//! The kernel, from the REGISTER or COMMIT until the entry's completion;
//! then the queue thread (which copies the request out before dispatching
//! it, so the file system's borrowed request never aliases the reply), and
//! the request's one reply, which may be sent later from another thread
//! (a parked lock request): it writes the buffers, then queues the entry
//! for commit and wakes the queue thread through an eventfd. Only the
//! queue thread submits to its ring.

use std::alloc::Layout;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::thread::ThreadId;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::warn;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::ReplyEmpty;
use crate::channel::ChannelSender;
use crate::ll::Operation;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

mod placement;

pub(crate) use placement::Activity;
use placement::{Placement, pin_to_cpu};

/// `struct fuse_uring_req_header`: `in_out[128]`, `op_in[128]`,
/// `struct fuse_uring_ent_in_out` (flags, commit_id, payload_sz, ...).
const HEADER_SIZE: usize = 288;
const OP_IN: usize = 128;
const OP_IN_SIZE: usize = 128;
const COMMIT_ID: usize = 256 + 8;
const PAYLOAD_SZ: usize = 256 + 16;
/// `struct fuse_in_header` and `struct fuse_out_header`.
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Entries a queue starts with, and the most it grows to while replies
/// are held back (parked lock requests keep their entries).
const INITIAL_ENTRIES: usize = 4;
const MAX_ENTRIES: usize = 64;
/// Entries kept waiting in the kernel when some are parked.
const MIN_AVAILABLE: usize = 2;

const EVENTFD_TAG: u64 = u64::MAX;
const RING_DEPTH: u32 = 256;

/// Whether the kernel can serve this connection through io_uring queues
/// (the module parameter; the INIT flag says the same per connection).
pub fn kernel_enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|s| s.trim() == "Y")
}

/// The queues the kernel expects: one per possible CPU
/// (`num_possible_cpus()`), counted from /sys/devices/system/cpu/possible
/// ("0-1", "0-3,6"); sysconf's count of configured CPUs if that is
/// unreadable. Too few queues keep the connection on /dev/fuse, too many
/// are refused: neither loses a request.
pub(crate) fn possible_cpus() -> usize {
    let from_sys = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| count_cpu_list(s.trim()));
    from_sys.unwrap_or_else(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        n.max(1) as usize
    })
}

/// The number of CPUs in a kernel CPU list ("0-3,6" is 5).
fn count_cpu_list(list: &str) -> Option<usize> {
    let mut n = 0usize;
    for part in list.split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// One entry's buffers, shared with the kernel (see the module docs for
/// who may touch them when).
struct Entry {
    header: *mut u8,
    payload: *mut u8,
    payload_size: usize,
    /// The REGISTER command's iovecs (header, payload); read by the kernel
    /// when it takes the command.
    iov: Box<[libc::iovec; 2]>,
}

// SAFETY: the buffers are plain bytes owned by the entry; the ownership
// protocol in the module docs makes their users take turns.
unsafe impl Send for Entry {}
// SAFETY: as above; shared references only pass the pointers around.
unsafe impl Sync for Entry {}

impl Entry {
    fn header_layout() -> Layout {
        Layout::from_size_align(HEADER_SIZE, 64).expect("header layout")
    }

    fn payload_layout(size: usize) -> Layout {
        Layout::from_size_align(size, 4096).expect("payload layout")
    }

    fn new(payload_size: usize) -> io::Result<Entry> {
        // SAFETY: both layouts have a non-zero size. Zeroed allocations of
        // this size come from fresh mappings, so untouched payload pages
        // cost no memory.
        let (header, payload) = unsafe {
            (
                std::alloc::alloc_zeroed(Self::header_layout()),
                std::alloc::alloc_zeroed(Self::payload_layout(payload_size)),
            )
        };
        if header.is_null() || payload.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
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
            iov,
        })
    }

    fn read_u32(&self, at: usize) -> u32 {
        let mut b = [0u8; 4];
        // SAFETY: `at + 4 <= HEADER_SIZE` at every call site; the caller
        // owns the entry (module docs).
        unsafe { std::ptr::copy_nonoverlapping(self.header.add(at), b.as_mut_ptr(), 4) };
        u32::from_ne_bytes(b)
    }

    fn read_u64(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        // SAFETY: as in `read_u32`.
        unsafe { std::ptr::copy_nonoverlapping(self.header.add(at), b.as_mut_ptr(), 8) };
        u64::from_ne_bytes(b)
    }

    /// The request the kernel put in this entry, in the layout a read of
    /// /dev/fuse gives (header, fixed argument, the rest), appended to
    /// `out`. None if the sizes do not add up.
    fn copy_request(&self, out: &mut Vec<u8>) -> Option<()> {
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

    /// Writes a reply (`struct fuse_out_header` first) into the buffers.
    fn write_reply(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let total: usize = data.iter().map(|d| d.len()).sum();
        if total < OUT_HEADER || total - OUT_HEADER > self.payload_size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a {total}-byte reply does not fit the ring entry"),
            ));
        }
        let mut at = 0usize;
        for d in data {
            let mut rest = &d[..];
            while !rest.is_empty() {
                let (dst, room) = if at < OUT_HEADER {
                    // SAFETY: at < OUT_HEADER <= HEADER_SIZE.
                    (unsafe { self.header.add(at) }, OUT_HEADER - at)
                } else {
                    // SAFETY: at - OUT_HEADER < total - OUT_HEADER <=
                    // payload_size.
                    (unsafe { self.payload.add(at - OUT_HEADER) }, total - at)
                };
                let n = room.min(rest.len());
                // SAFETY: `dst` has `room >= n` bytes left in its buffer;
                // `rest` is caller memory, never an entry's.
                unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), dst, n) };
                at += n;
                rest = &rest[n..];
            }
        }
        let payload_sz = ((total - OUT_HEADER) as u32).to_ne_bytes();
        // SAFETY: PAYLOAD_SZ + 4 <= HEADER_SIZE.
        unsafe {
            std::ptr::copy_nonoverlapping(payload_sz.as_ptr(), self.header.add(PAYLOAD_SZ), 4)
        };
        Ok(())
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with these layouts. Entries are dropped
        // only once the kernel let go of them (the queue thread drops its
        // table after the last completion; a late reply holds an Arc).
        unsafe {
            std::alloc::dealloc(self.header, Self::header_layout());
            std::alloc::dealloc(self.payload, Self::payload_layout(self.payload_size));
        }
    }
}

/// What a queue shares with the replies of its requests.
#[derive(Debug)]
struct Shared {
    /// Entries whose reply is written, waiting for the queue thread to
    /// commit them.
    ready: Mutex<Vec<usize>>,
    eventfd: OwnedFd,
    owner: ThreadId,
    /// The connection went away: replies have nowhere to go.
    closed: AtomicBool,
}

/// The reply path of a request that came through a queue entry.
#[derive(Clone)]
pub(crate) struct UringReply {
    shared: Arc<Shared>,
    entry: Arc<Entry>,
    idx: usize,
}

impl std::fmt::Debug for UringReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringReply").field("idx", &self.idx).finish()
    }
}

impl UringReply {
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        if self.shared.closed.load(Ordering::Relaxed) {
            return Err(io::Error::from_raw_os_error(libc::ENOTCONN));
        }
        self.entry.write_reply(data)?;
        self.shared.ready.lock().push(self.idx);
        if std::thread::current().id() != self.shared.owner {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to our eventfd.
            let r = unsafe {
                libc::write(
                    self.shared.eventfd.as_raw_fd(),
                    one.as_ptr().cast(),
                    one.len(),
                )
            };
            if r != 8 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// A SQE for FUSE's uring command `op` on queue `qid`.
fn fuse_cmd(fuse_fd: RawFd, op: u32, qid: u16, commit_id: u64) -> opcode::UringCmd80 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    opcode::UringCmd80::new(types::Fd(fuse_fd), op).cmd(cmd)
}

/// Sets the SQE's `len` (the REGISTER's iovec count), which the crate's
/// `UringCmd80` builder has no setter for.
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: `Entry128` is `repr(C)`: a 64-byte `io_uring_sqe` followed by
    // 64 bytes of command data, integers only, no padding or Drop; `len` is
    // the u32 at offset 24 of `io_uring_sqe` (include/uapi/linux/io_uring.h),
    // which `UringCmd80` leaves zero.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: the same bytes with one field set; every bit pattern of these
    // integers is valid.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// Results that mean the connection (or our ring) is going away.
fn is_gone(res: i32) -> bool {
    matches!(
        -res,
        libc::ENOTCONN | libc::ECONNABORTED | libc::ENODEV | libc::ECANCELED
    )
}

/// Serves queue `qid` until the connection ends. `fuse_fd` is the
/// session's /dev/fuse; `payload_size` at least the kernel's largest
/// request or reply payload.
pub(crate) fn run_queue<FS: Filesystem>(
    se: SessionEventLoop<FS>,
    sender: ChannelSender,
    fuse_fd: RawFd,
    qid: u16,
    payload_size: usize,
    activity: Arc<Activity>,
) -> io::Result<()> {
    pin_to_cpu(qid as usize);
    let ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(RING_DEPTH)
        .or_else(|_| IoUring::builder().build(RING_DEPTH))?;
    // SAFETY: eventfd has no memory preconditions; a valid fd is owned below.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        return Err(io::Error::last_os_error());
    }
    let shared = Arc::new(Shared {
        ready: Mutex::new(Vec::new()),
        // SAFETY: `efd` is a fresh fd that nothing else owns.
        eventfd: unsafe { OwnedFd::from_raw_fd(efd) },
        owner: std::thread::current().id(),
        closed: AtomicBool::new(false),
    });
    let mut q = Queue {
        ring,
        fuse_fd,
        qid,
        payload_size,
        entries: Vec::new(),
        commit_ids: Vec::new(),
        in_kernel: 0,
    };
    for _ in 0..INITIAL_ENTRIES {
        q.register()?;
    }
    // Leaked on purpose: the kernel may still complete the pending read
    // into it after the ring is closed (its cancellation is asynchronous).
    let efd_buf: &'static mut [u8; 8] = Box::leak(Box::new([0u8; 8]));
    q.arm_eventfd(&shared, efd_buf)?;
    let mut request = Vec::with_capacity(payload_size + IN_HEADER + OP_IN_SIZE);
    let mut done = Vec::new();
    let mut closing = false;
    let mut placement = Placement::new();
    loop {
        placement.settle(&activity, qid as usize);
        let r = q.ring.submit_and_wait(1);
        match r {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                shared.closed.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        done.clear();
        done.extend(q.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(tag, res) in &done {
            if tag == EVENTFD_TAG {
                if res >= 0 || res == -libc::EINTR || res == -libc::EAGAIN {
                    q.arm_eventfd(&shared, efd_buf)?;
                }
                continue;
            }
            q.in_kernel -= 1;
            if res < 0 {
                if is_gone(res) {
                    closing = true;
                } else {
                    warn!(
                        "fuse uring queue {qid}: entry {tag} failed: {}",
                        io::Error::from_raw_os_error(-res)
                    );
                }
                continue;
            }
            let idx = tag as usize;
            let entry = q.entries[idx].clone();
            q.commit_ids[idx] = entry.read_u64(COMMIT_ID);
            request.clear();
            let reply = UringReply {
                shared: shared.clone(),
                entry: entry.clone(),
                idx,
            };
            let parsed = entry
                .copy_request(&mut request)
                .and_then(|()| RequestWithSender::new_uring(sender.clone(), reply.clone(), &request));
            match parsed {
                Some(req) => {
                    if let Ok(Operation::Destroy(_)) = req.request.operation() {
                        let _ = req.reply::<ReplyEmpty>().ok();
                    } else {
                        req.dispatch(&se);
                    }
                }
                None => {
                    // Unparsable: answer EIO so the caller and the entry
                    // are not left waiting.
                    warn!("fuse uring queue {qid}: malformed request in entry {idx}");
                    let unique = entry.read_u64(8);
                    let mut h = [0u8; OUT_HEADER];
                    h[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
                    h[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
                    h[8..16].copy_from_slice(&unique.to_ne_bytes());
                    let _ = reply.send(&[IoSlice::new(&h)]);
                }
            }
        }
        let served = done.iter().filter(|&&(t, r)| t != EVENTFD_TAG && r >= 0).count();
        if served > 0 {
            activity.add(qid as usize, served as u64);
        }
        if closing {
            shared.closed.store(true, Ordering::Relaxed);
        }
        let ready = std::mem::take(&mut *shared.ready.lock());
        for idx in ready {
            if closing {
                continue;
            }
            q.commit(idx)?;
        }
        // Parked replies hold their entries: keep a few waiting in the
        // kernel so this CPU's other requests are still taken.
        while !closing && q.in_kernel < MIN_AVAILABLE && q.entries.len() < MAX_ENTRIES {
            q.register()?;
        }
        if closing && q.in_kernel == 0 {
            return Ok(());
        }
    }
}

struct Queue {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    fuse_fd: RawFd,
    qid: u16,
    payload_size: usize,
    entries: Vec<Arc<Entry>>,
    commit_ids: Vec<u64>,
    /// Entries the kernel holds (registered or committed, not completed).
    in_kernel: usize,
}

impl Drop for Queue {
    fn drop(&mut self) {
        // Left early (an error) while the kernel still holds entries: it may
        // write into them until it tears the queue down, so they must not be
        // freed.
        if self.in_kernel > 0 {
            for e in self.entries.drain(..) {
                std::mem::forget(e);
            }
        }
    }
}

impl Queue {
    fn push(&mut self, sqe: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: every buffer an SQE names (entry buffers and iovecs,
            // the eventfd buffer) lives until its completion: entries are
            // kept in `self.entries` for the queue's life, the eventfd
            // buffer in `run_queue` until the ring is dropped.
            if unsafe { self.ring.submission().push(sqe) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn register(&mut self) -> io::Result<()> {
        let entry = Arc::new(Entry::new(self.payload_size)?);
        let idx = self.entries.len();
        let sqe = fuse_cmd(self.fuse_fd, CMD_REGISTER, self.qid, 0)
            .addr(Some(entry.iov.as_ptr() as u64))
            .build();
        let sqe = with_len(sqe, 2).user_data(idx as u64);
        self.entries.push(entry);
        self.commit_ids.push(0);
        self.push(&sqe)?;
        self.in_kernel += 1;
        Ok(())
    }

    fn commit(&mut self, idx: usize) -> io::Result<()> {
        let sqe = fuse_cmd(
            self.fuse_fd,
            CMD_COMMIT_AND_FETCH,
            self.qid,
            self.commit_ids[idx],
        )
        .build()
        .user_data(idx as u64);
        self.push(&sqe)?;
        self.in_kernel += 1;
        Ok(())
    }

    fn arm_eventfd(&mut self, shared: &Shared, buf: &mut [u8; 8]) -> io::Result<()> {
        let sqe = opcode::Read::new(
            types::Fd(shared.eventfd.as_raw_fd()),
            buf.as_mut_ptr(),
            buf.len() as u32,
        )
        .build()
        .user_data(EVENTFD_TAG);
        self.push(&sqe.into())
    }
}
