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
//! notifications use /dev/fuse, so the classic loops keep running; but a
//! FORGET the kernel forces (after a READDIRPLUS entry it could not link)
//! is sent as an ordinary request, and may come through a ring.
//!
//! Entries' buffers are memfds, so a live upgrade's successor can take
//! them over (`uring/handover.rs`).
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

use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
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

mod entry;
mod growth;
mod handover;
mod nudge;
mod placement;
mod recover;

use entry::{COMMIT_ID, Entry, IN_HEADER, OP_IN_SIZE, OUT_HEADER, State};
pub use handover::RingEntry;
pub use recover::RingKeeper;
pub(crate) use handover::RingCtl;
use handover::{PARK, Phase, RELEASE, SEAL, SERVE};
pub(crate) use placement::Activity;
use placement::{Placement, pin_to_cpu};

use crate::park::ParkCtl;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Entries a queue starts with; it grows while replies are held back
/// (parked lock requests keep their entries), as far as `growth` allows.
const INITIAL_ENTRIES: usize = 4;
/// Entries kept waiting in the kernel when some are parked.
const MIN_AVAILABLE: usize = 2;

const EVENTFD_TAG: u64 = u64::MAX;
const RING_DEPTH: u32 = 256;
/// Completions a ring holds: one per entry it could have, twice over (a
/// full completion queue would make the kernel hold completions back and
/// refuse submissions until they are reaped).
const CQ_DEPTH: u32 = (2 * (growth::PER_QUEUE + growth::POOL + 1)) as u32;

thread_local! {
    /// Entries the queue served on this thread could still give requests
    /// (`usize::MAX` on other threads), as of the request being served.
    static ROOM: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
    /// The request being dispatched on this queue thread holds its reply
    /// back (`reply_held`).
    static HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// On an io_uring queue's thread, while a request is dispatched: how many
/// more of that queue's entries could hold requests at once (its most,
/// less those the server holds: requests being served, replies held back
/// such as lock waits). `None` on other threads (/dev/fuse loops).
///
/// A file system that holds replies back (a blocking lock's wait) must
/// not take them all: a queue without an entry takes no request of its
/// CPU's callers, whatever it is, until a held reply goes.
pub fn queue_room() -> Option<usize> {
    let room = ROOM.with(std::cell::Cell::get);
    (room != usize::MAX).then_some(room)
}

/// On an io_uring queue's thread, while a request is dispatched: says that
/// its reply is held back until something else happens (a lock wait
/// parked until the lock goes), not merely answered later from another
/// thread. The queue then makes sure that requests the kernel queued
/// behind its held entries are handed to the entries it has free
/// (`uring/nudge.rs`): otherwise they may wait for as long as the replies
/// are held, and for good if one of them is what the held replies wait
/// for. Does nothing on other threads.
pub fn reply_held() {
    if queue_room().is_some() {
        HELD.with(|h| h.set(true));
    }
}

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
        nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF)
            .ok()
            .flatten()
            .map_or(1, |n| n.max(1) as usize)
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

/// Replies of a queue's requests, written and waiting for the queue
/// thread to commit them.
#[derive(Debug, Default)]
struct Ready {
    /// Entries whose reply is written.
    list: Vec<usize>,
    /// The queue is sealed for a hand-over (`handover.rs`): replies are
    /// kept in `deferred`, not written.
    sealed: bool,
    deferred: Vec<(usize, Vec<u8>)>,
}

/// What a queue shares with the replies of its requests.
#[derive(Debug)]
pub(crate) struct Shared {
    ready: Mutex<Ready>,
    eventfd: OwnedFd,
    owner: ThreadId,
    /// The connection went away: replies have nowhere to go.
    closed: AtomicBool,
}

impl Shared {
    /// Wakes the queue thread.
    fn wake(&self) {
        // An eventfd write fails only when its counter would overflow,
        // which a pending wake-up already does the job of.
        let _ = nix::unistd::write(&self.eventfd, &1u64.to_ne_bytes());
    }
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
        {
            // Written under the lock: a queue sealed for a hand-over sees
            // every reply either written and listed, or not written at all.
            let mut ready = self.shared.ready.lock();
            if ready.sealed {
                let total = data.iter().map(|d| d.len()).sum();
                self.entry.fits(total)?;
                let mut b = Vec::with_capacity(total);
                for d in data {
                    b.extend_from_slice(d);
                }
                ready.deferred.push((self.idx, b));
                return Ok(());
            }
            self.entry.write_reply(data)?;
            ready.list.push(self.idx);
        }
        if std::thread::current().id() != self.shared.owner {
            self.shared.wake();
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
    // which `UringCmd80` leaves zero. The bytes go back with that one field
    // set, and every bit pattern of these integers is valid.
    unsafe {
        let mut raw: [u8; 128] = std::mem::transmute(e);
        raw[24..28].copy_from_slice(&len.to_ne_bytes());
        std::mem::transmute::<[u8; 128], squeue::Entry128>(raw)
    }
}

/// Results that mean the connection (or our ring) is going away.
fn is_gone(res: i32) -> bool {
    matches!(
        -res,
        libc::ENOTCONN | libc::ECONNABORTED | libc::ENODEV | libc::ECANCELED
    )
}

/// A predecessor's entry, mapped here, for queue `qid`.
pub(crate) struct Adopted {
    qid: u16,
    entry: Arc<Entry>,
    replied: bool,
    /// Of a server that died (`recover.rs`), not one that handed over.
    recovered: bool,
}

/// Entries mapped by [`premap_ring_entries`], until `adopt` takes them.
static PREMAPPED: std::sync::Mutex<Vec<Entry>> = std::sync::Mutex::new(Vec::new());

/// Maps the entries a predecessor's queues held at their addresses now,
/// as soon as the process knows them, for `Session::adopt_ring_entries`
/// to take as they are. The addresses were chosen in the predecessor's
/// address space; mapped only at adoption, after the successor had
/// rebuilt its file system (memfs's data, the threads' stacks and malloc
/// arenas), one was found taken now and then and the upgrade refused
/// (`File exists`). Best effort: an entry whose address is taken already
/// is left for the adoption to report.
pub fn premap_ring_entries(entries: &[RingEntry], payload_size: usize) {
    let mut held = PREMAPPED.lock().unwrap_or_else(|p| p.into_inner());
    for e in entries {
        let Ok(memfd) = e.memfd.try_clone() else {
            continue;
        };
        if let Ok(entry) = Entry::adopt(memfd, e.addr, payload_size) {
            held.push(entry);
        }
    }
}

/// The entry [`premap_ring_entries`] mapped at `addr` for a payload of
/// `payload_size` bytes, if any.
fn premapped(addr: u64, payload_size: usize) -> Option<Entry> {
    let mut held = PREMAPPED.lock().unwrap_or_else(|p| p.into_inner());
    let at = held
        .iter()
        .position(|e| e.addr() == addr && e.payload_size() == payload_size)?;
    Some(held.swap_remove(at))
}

/// Maps the entries a predecessor's queues held (`RingEntry`) at their
/// addresses (or takes them as [`premap_ring_entries`] mapped them).
/// Fails, mapping none, if any address is taken here.
pub(crate) fn adopt(entries: Vec<RingEntry>, payload_size: usize) -> io::Result<Vec<Adopted>> {
    entries
        .into_iter()
        .map(|e| {
            let entry = match premapped(e.addr, payload_size) {
                Some(entry) => entry,
                None => Entry::adopt(e.memfd, e.addr, payload_size)?,
            };
            Ok(Adopted {
                qid: e.qid,
                entry: Arc::new(entry),
                replied: e.replied,
                recovered: e.recovered,
            })
        })
        .collect()
}

/// Gives `keeper` every entry of `adopted` (a resumed session's, before
/// its queues start).
pub(crate) fn keep_adopted(adopted: &[Adopted], keeper: &dyn RingKeeper) {
    for a in adopted {
        keeper.keep(a.qid, a.entry.addr(), a.entry.memfd());
    }
}

impl std::fmt::Debug for Adopted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adopted")
            .field("qid", &self.qid)
            .field("addr", &self.entry.addr())
            .field("replied", &self.replied)
            .field("recovered", &self.recovered)
            .finish()
    }
}

impl Adopted {
    pub(crate) fn qid(&self) -> u16 {
        self.qid
    }
}

/// Deregisters a queue from the session's `RingCtl` when it ends.
struct Registered<'a>(&'a RingCtl, u16);

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.0.gone(self.1);
    }
}

/// What a queue thread serves with.
struct Server<'a, FS: Filesystem> {
    se: &'a SessionEventLoop<FS>,
    sender: &'a ChannelSender,
    shared: &'a Arc<Shared>,
    qid: u16,
    request: Vec<u8>,
    /// A request served since the last nudge holds its reply back.
    held: bool,
}

impl<FS: Filesystem> Server<'_, FS> {
    /// Dispatches the request the kernel put in entry `idx`.
    fn serve(&mut self, q: &Queue, idx: usize) {
        let entry = q.entries[idx].clone();
        self.request.clear();
        let reply = UringReply {
            shared: self.shared.clone(),
            entry: entry.clone(),
            idx,
        };
        let parsed = entry.copy_request(&mut self.request).and_then(|()| {
            RequestWithSender::new_uring(self.sender.clone(), reply.clone(), &self.request)
        });
        match parsed {
            Some(req) => {
                let op = req.request.operation();
                if let Ok(Operation::Destroy(_)) = op {
                    let _ = req.reply::<ReplyEmpty>().ok();
                    return;
                }
                // Sent with no reply expected: a FORGET the kernel forces
                // when it cannot link an entry of a READDIRPLUS reply (a
                // directory moved behind its back). Over /dev/fuse such a
                // request ends once read; in a ring entry it ends only at
                // the entry's commit, and the READDIRPLUS that sent it
                // waits for that, holding its directory's lock: never
                // committed, the lister hung for good, and the entry was
                // lost to its queue.
                let noreply = matches!(
                    op,
                    Ok(Operation::Forget(_) | Operation::BatchForget(_) | Operation::Interrupt(_))
                );
                // The entry served is not in the kernel either.
                ROOM.with(|r| r.set(q.capacity().saturating_sub(q.entries.len() - q.in_kernel)));
                HELD.with(|h| h.set(false));
                req.dispatch(self.se);
                ROOM.with(|r| r.set(usize::MAX));
                self.held |= HELD.with(|h| h.replace(false));
                if noreply {
                    let _ = reply.send(&[IoSlice::new(&out_header(entry.read_u64(8), 0))]);
                }
            }
            None => {
                // Unparsable: answer EIO so the caller and the entry are
                // not left waiting.
                warn!(
                    "fuse uring queue {}: malformed request in entry {idx}",
                    self.qid
                );
                let h = out_header(entry.read_u64(8), -libc::EIO);
                let _ = reply.send(&[IoSlice::new(&h)]);
            }
        }
    }
}

/// A reply's header alone: request `unique` answered `error` (0 or a
/// negated errno), no payload.
fn out_header(unique: u64, error: i32) -> [u8; OUT_HEADER] {
    let mut h = [0u8; OUT_HEADER];
    h[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
    h[4..8].copy_from_slice(&error.to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h
}

/// Serves queue `qid` until the connection ends or the session is handed
/// over. `fuse_fd` is the session's /dev/fuse; `payload_size` at least the
/// kernel's largest request or reply payload. `adopted`: entries of a
/// predecessor's queue `qid` (a resumed session), answered first.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_queue<FS: Filesystem>(
    se: SessionEventLoop<FS>,
    sender: ChannelSender,
    fuse_fd: RawFd,
    qid: u16,
    payload_size: usize,
    activity: Arc<Activity>,
    park: Arc<ParkCtl>,
    adopted: Vec<Adopted>,
    resumed: bool,
) -> io::Result<()> {
    let rings = &park.rings;
    let setup = (|| {
        pin_to_cpu(qid as usize);
        let ring: IoUring<squeue::Entry128, cqueue::Entry> = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_cqsize(CQ_DEPTH)
            .build(RING_DEPTH)
            .or_else(|_| IoUring::builder().setup_cqsize(CQ_DEPTH).build(RING_DEPTH))?;
        let efd = nix::sys::eventfd::EventFd::from_value_and_flags(
            0,
            nix::sys::eventfd::EfdFlags::EFD_CLOEXEC,
        )?;
        let shared = Arc::new(Shared {
            ready: Mutex::new(Ready::default()),
            eventfd: OwnedFd::from(efd),
            owner: std::thread::current().id(),
            closed: AtomicBool::new(false),
        });
        Ok((ring, shared))
    })();
    let (ring, shared) = match setup {
        Ok(x) => x,
        Err(e) => {
            rings.started(None);
            return Err(e);
        }
    };
    rings.started(Some((qid, shared.clone())));
    let _registered = Registered(rings, qid);
    let mut q = Queue {
        ring,
        fuse_fd,
        qid,
        payload_size,
        entries: Vec::new(),
        commit_ids: Vec::new(),
        live: Vec::new(),
        in_kernel: 0,
        keeper: rings.keeper(),
        borrowed: 0,
        stunted: false,
    };
    let r = serve_queue(&se, &sender, &mut q, &shared, &activity, rings, adopted, resumed);
    if r.is_err() {
        shared.closed.store(true, Ordering::Relaxed);
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn serve_queue<FS: Filesystem>(
    se: &SessionEventLoop<FS>,
    sender: &ChannelSender,
    q: &mut Queue,
    shared: &Arc<Shared>,
    activity: &Activity,
    rings: &RingCtl,
    adopted: Vec<Adopted>,
    resumed: bool,
) -> io::Result<()> {
    let qid = q.qid;
    // Leaked on purpose: the kernel may still complete the pending read
    // into it after the ring is closed (its cancellation is asynchronous).
    let efd_buf: &'static mut [u8; 8] = Box::leak(Box::new([0u8; 8]));
    q.arm_eventfd(shared, efd_buf)?;
    // Requests this queue holds and has not dispatched (taken while
    // parked, or adopted).
    let mut held = Vec::new();
    // A dead server's entries (`recover.rs`).
    let (recovered, adopted): (Vec<_>, Vec<_>) = adopted.into_iter().partition(|a| a.recovered);
    if !recovered.is_empty() {
        let entries = recovered.into_iter().map(|a| a.entry).collect();
        recover::take(q, entries, &mut held)?;
    }
    // A predecessor's entries are this queue's once answered: only the
    // rest is registered anew, so entries do not pile up over upgrades.
    for _ in (adopted.len() + q.entries.len())..INITIAL_ENTRIES {
        q.take_slot(true);
        q.register()?;
    }
    let mut srv = Server {
        se,
        sender,
        shared,
        qid,
        request: Vec::with_capacity(q.payload_size + IN_HEADER + OP_IN_SIZE),
        held: false,
    };
    let nudger = nudge::Nudger::default();
    for a in adopted {
        let idx = q.adopt(a.entry);
        if a.replied {
            q.commit(idx)?;
        } else {
            held.push(idx);
        }
    }
    if resumed {
        // Registered (and adopted entries committed) before the nudge.
        q.ring.submit()?;
        if let Some(root) = rings.root() {
            handover::nudge(qid, &root);
        }
    }
    let mut mode = SERVE;
    let mut done = Vec::new();
    let mut closing = false;
    let mut placement = Placement::new();
    loop {
        let command = rings.command();
        if command != mode {
            match command {
                SERVE => {
                    if mode == SEAL {
                        q.unseal(shared);
                    }
                    mode = SERVE;
                    rings.report(qid, Phase::Serving, Vec::new());
                    if let Some(root) = rings.root() {
                        handover::nudge(qid, &root);
                    }
                }
                PARK if mode == SERVE => mode = PARK,
                SEAL if mode == PARK && q.in_kernel == 0 => match q.seal(shared) {
                    Ok(exported) => {
                        mode = SEAL;
                        rings.report(qid, Phase::Sealed, exported);
                    }
                    Err(e) => warn!("fuse uring queue {qid}: cannot hand its entries over: {e}"),
                },
                // Handed over: the successor holds every entry; nothing in
                // this ring is armed, so closing it loses no request.
                RELEASE if mode == SEAL => return Ok(()),
                _ => {}
            }
        }
        if mode == SERVE {
            for idx in std::mem::take(&mut held) {
                q.top_up(closing, shared)?;
                srv.serve(q, idx);
            }
            // Before waiting: the entries answered here may be all this
            // queue has (an adopted queue registers no more than it lacks).
            if !closing {
                for idx in std::mem::take(&mut shared.ready.lock().list) {
                    q.commit(idx)?;
                }
                // Parked replies hold their entries: keep a few waiting in
                // the kernel so this CPU's other requests are still taken.
                q.top_up(closing, shared)?;
                // Entries registered (or committed) just now are free only
                // once submitted; the nudge's request must find one.
                if std::mem::take(&mut srv.held) {
                    q.ring.submit()?;
                    nudger.nudge(qid, rings.root());
                }
            }
        } else if mode == PARK {
            rings.report(qid, Phase::Parked { armed: q.in_kernel }, Vec::new());
        }
        placement.settle(activity, qid as usize);
        let r = q.ring.submit_and_wait(1);
        match r {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        done.clear();
        done.extend(q.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(tag, res) in &done {
            if tag == EVENTFD_TAG {
                if res >= 0 || res == -libc::EINTR || res == -libc::EAGAIN {
                    q.arm_eventfd(shared, efd_buf)?;
                }
                continue;
            }
            q.in_kernel -= 1;
            let idx = tag as usize;
            if res < 0 {
                q.live[idx] = false;
                if is_gone(res) {
                    closing = true;
                    continue;
                }
                q.let_go(idx);
                if res == -libc::ENOENT {
                    // A taken-over entry whose reply its dead server had
                    // committed after all (`recover.rs`).
                    log::debug!("fuse uring queue {qid}: entry {tag} held nothing to commit");
                } else {
                    warn!(
                        "fuse uring queue {qid}: entry {tag} failed: {}",
                        io::Error::from_raw_os_error(-res)
                    );
                }
                continue;
            }
            q.commit_ids[idx] = q.entries[idx].read_u64(COMMIT_ID);
            q.entries[idx].set_state(State::Request);
            if mode == SERVE {
                q.top_up(closing, shared)?;
                srv.serve(q, idx);
            } else {
                held.push(idx);
            }
        }
        let served = done
            .iter()
            .filter(|&&(t, r)| t != EVENTFD_TAG && r >= 0)
            .count();
        if served > 0 {
            activity.add(qid as usize, served as u64);
        }
        if closing {
            shared.closed.store(true, Ordering::Relaxed);
            if q.in_kernel == 0 {
                return Ok(());
            }
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
    /// Entries the kernel knows (not failed).
    live: Vec<bool>,
    /// Entries the kernel holds (registered or committed, not completed).
    in_kernel: usize,
    /// Where entries are kept beyond this process (a supervisor).
    keeper: Option<Arc<dyn RingKeeper>>,
    /// Entries borrowed from the process's pool (`growth`).
    borrowed: usize,
    /// A new entry's buffers could not be made (no fd or memory left):
    /// the queue has what it has from then on.
    stunted: bool,
}

impl Drop for Queue {
    fn drop(&mut self) {
        growth::give_back(self.borrowed);
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

    /// The most entries this queue could have now.
    fn capacity(&self) -> usize {
        if self.stunted {
            self.entries.len()
        } else {
            growth::capacity(self.entries.len())
        }
    }

    /// Counts one more entry against the queue's share, borrowing past
    /// it; false if the pool has none left (never when `forced`).
    fn take_slot(&mut self, forced: bool) -> bool {
        if self.entries.len() < growth::PER_QUEUE {
            return true;
        }
        let lent = growth::borrow(forced);
        self.borrowed += usize::from(lent);
        lent
    }

    /// Gives back the slot the last `take_slot` counted: its entry was
    /// never made.
    fn untake_slot(&mut self) {
        if self.entries.len() >= growth::PER_QUEUE {
            self.borrowed -= 1;
            growth::give_back(1);
        }
    }

    /// Registers one more entry if the queue may grow: false if it may
    /// not, or its buffers cannot be made (said once). Parked replies
    /// then stay within what the queue has (`capacity`), so a queue that
    /// cannot grow is not left without entries for its other requests.
    fn grow(&mut self) -> io::Result<bool> {
        if self.stunted || !self.take_slot(false) {
            return Ok(false);
        }
        match Entry::new(self.payload_size) {
            Ok(entry) => {
                self.register_entry(entry)?;
                Ok(true)
            }
            Err(e) => {
                self.untake_slot();
                self.stunted = true;
                warn!(
                    "fuse uring queue {}: stays at {} entries: a new entry's buffers: {e}",
                    self.qid,
                    self.entries.len()
                );
                Ok(false)
            }
        }
    }

    /// Grows the queue until [`MIN_AVAILABLE`] entries wait in the kernel
    /// once the replies written so far are committed (before the queue
    /// waits), or it may not grow: done before each request is
    /// dispatched, so that a handler told it may hold its reply
    /// (`queue_room`) leaves entries that exist, not ones the queue might
    /// fail to make. A queue that cannot grow reports no room beyond its
    /// entries, and holds are refused while it still has one waiting.
    /// (Answered entries count: else every burst of requests answered at
    /// once would grow the queue for good.)
    fn top_up(&mut self, closing: bool, shared: &Shared) -> io::Result<()> {
        let short = |q: &Queue| {
            q.in_kernel < MIN_AVAILABLE
                && q.in_kernel + shared.ready.lock().list.len() < MIN_AVAILABLE
        };
        while !closing && short(self) && self.grow()? {}
        Ok(())
    }

    fn register(&mut self) -> io::Result<()> {
        let entry = Entry::new(self.payload_size)?;
        self.register_entry(entry)
    }

    fn register_entry(&mut self, entry: Entry) -> io::Result<()> {
        let entry = Arc::new(entry);
        // Kept before the kernel knows it: a server started after this one
        // dies must be able to map every entry the kernel may answer from.
        if let Some(k) = &self.keeper {
            k.keep(self.qid, entry.addr(), entry.memfd());
        }
        let idx = self.entries.len();
        let sqe = fuse_cmd(self.fuse_fd, CMD_REGISTER, self.qid, 0)
            .addr(Some(entry.iov.as_ptr() as u64))
            .build();
        let sqe = with_len(sqe, 2).user_data(idx as u64);
        self.entries.push(entry);
        self.commit_ids.push(0);
        self.live.push(true);
        self.push(&sqe)?;
        self.in_kernel += 1;
        Ok(())
    }

    /// The kernel let entry `idx` go: no one needs its buffers kept.
    fn let_go(&self, idx: usize) {
        if let Some(k) = &self.keeper {
            k.forget(self.qid, self.entries[idx].addr());
        }
    }

    /// A predecessor's entry holding a request: this queue's from now on.
    fn adopt(&mut self, entry: Arc<Entry>) -> usize {
        self.take_slot(true);
        let idx = self.entries.len();
        self.commit_ids.push(entry.read_u64(COMMIT_ID));
        self.entries.push(entry);
        self.live.push(true);
        idx
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
        // The state stays `Replied`: a server started after this one dies
        // commits the reply again, which the kernel refuses (ENOENT) if
        // this commit got there (`recover.rs`).
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

    /// Seals the queue for a hand-over (none of its entries in the kernel)
    /// and describes every entry: each holds a request, answered (its
    /// reply written, listed in `ready`) or not.
    fn seal(&mut self, shared: &Shared) -> io::Result<Vec<RingEntry>> {
        let mut ready = shared.ready.lock();
        let mut out = Vec::new();
        for (idx, e) in self.entries.iter().enumerate() {
            if self.live[idx] {
                out.push(RingEntry {
                    qid: self.qid,
                    addr: e.addr(),
                    replied: ready.list.contains(&idx),
                    recovered: false,
                    memfd: e.dup_memfd()?,
                });
            }
        }
        ready.sealed = true;
        Ok(out)
    }

    /// The hand-over failed: replies kept aside while sealed are written
    /// now, to be committed with the others.
    fn unseal(&mut self, shared: &Shared) {
        let mut ready = shared.ready.lock();
        ready.sealed = false;
        for (idx, b) in std::mem::take(&mut ready.deferred) {
            match self.entries[idx].write_reply(&[IoSlice::new(&b)]) {
                Ok(()) => ready.list.push(idx),
                Err(e) => warn!("fuse uring queue {}: reply lost: {e}", self.qid),
            }
        }
    }
}

#[cfg(test)]
mod premap_tests {
    use super::*;

    /// A predecessor's entries at their addresses: their memfds, and the
    /// addresses, left free (the predecessor's own mappings dropped, all
    /// made before any is, so that no two share an address).
    fn handed_over(n: u16) -> Vec<RingEntry> {
        let made: Vec<Entry> = (0..n).map(|_| Entry::new(8192).unwrap()).collect();
        made.iter()
            .zip(0..)
            .map(|(e, qid)| {
                e.write_header(8, &(100 + u64::from(qid)).to_ne_bytes());
                RingEntry {
                    qid,
                    addr: e.addr(),
                    replied: false,
                    recovered: false,
                    memfd: e.memfd().try_clone_to_owned().unwrap(),
                }
            })
            .collect()
    }

    #[test]
    fn entries_mapped_ahead_are_adopted_as_they_are() {
        let entries = handed_over(2);
        let addrs: Vec<u64> = entries.iter().map(|e| e.addr).collect();
        premap_ring_entries(&entries, 8192);
        // Held now: nothing else maps there, and the adoption takes those
        // mappings (mapping the addresses again would fail: taken).
        let adopted = adopt(entries, 8192).unwrap();
        for (a, addr) in adopted.iter().zip(&addrs) {
            assert_eq!(a.entry.addr(), *addr);
            assert_eq!(a.entry.read_u64(8), 100 + u64::from(a.qid));
        }
        assert!(premapped(addrs[0], 8192).is_none(), "taken once");
        // An address taken before the state came (here by the adopted
        // entry itself): not premapped, and the adoption says so.
        let again = RingEntry {
            qid: 0,
            addr: addrs[0],
            replied: false,
            recovered: false,
            memfd: adopted[0].entry.memfd().try_clone_to_owned().unwrap(),
        };
        premap_ring_entries(std::slice::from_ref(&again), 8192);
        let err = adopt(vec![again], 8192).unwrap_err();
        assert!(err.to_string().contains("mapping a ring entry"), "{err}");
    }
}
