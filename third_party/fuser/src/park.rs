//! Parking the /dev/fuse request loops, for handing a live connection to
//! another process.
//!
//! A parked loop neither reads nor dispatches a request, and keeps its fd
//! open: requests it read and that are still unanswered (held by the file
//! system for a later reply) stay in that fd's processing queue, where the
//! successor's `FUSE_NOTIFY_RESEND` finds them. Closing the fd would end
//! them with `ECONNABORTED` instead.
//!
//! A loop blocked in `read(2)` of /dev/fuse is woken by [`park_signal`],
//! sent with `pthread_kill` to that thread only, whose handler does nothing
//! but acknowledge, and which is installed without `SA_RESTART` so the read
//! fails with `EINTR`. The hot path pays no syscall: an atomic store and a
//! load before each read, a compare-exchange after it.
//!
//! A signal must never land while a loop is dispatching (it would fail an
//! interruptible syscall of the file system with `EINTR`). So each loop
//! publishes a phase: `READING` from just before it checks for a park until
//! its read returned, `BUSY` otherwise. The parker only signals a loop it
//! moved from `READING` to `KICKED`; the handler moves it back to
//! `READING`; a loop whose read returned leaves `READING` for `BUSY` only by
//! a compare-exchange, waiting (spinning: the signal is already on its way)
//! while it is `KICKED`. A signal that landed just before the read (the
//! handler ran, the read then blocked) leaves the loop `READING` and
//! unparked, and the parker sends another.

use std::cell::Cell;
use std::io;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;
use std::time::Instant;

use parking_lot::Condvar;
use parking_lot::Mutex;

const BUSY: u8 = 0;
const READING: u8 = 1;
const KICKED: u8 = 2;

/// How long the parker waits for a signalled loop before signalling it
/// again (its first signal may have landed just before its read).
const RESEND_EVERY: Duration = Duration::from_millis(2);

/// The real-time signal that wakes a request loop blocked in `read(2)` of
/// /dev/fuse when the session is parked: `SIGRTMAX() - 2`, away from the
/// low real-time signals that libraries tend to take from `SIGRTMIN()` up.
///
/// fuser installs a handler for it process-wide (once, at the first
/// `Pauser::park`); the handler does nothing in threads that are not fuser
/// request loops, and only loops are ever sent it, but from then on the
/// signal no longer kills the process by default. `park` fails if another
/// handler is already installed for it. Request loops unblock it in their
/// own signal mask; other threads' masks are left alone.
/// (Without real-time signals, outside Linux: `SIGUSR2`.)
pub fn park_signal() -> i32 {
    #[cfg(target_os = "linux")]
    return libc::SIGRTMAX() - 2;
    #[cfg(not(target_os = "linux"))]
    return libc::SIGUSR2;
}

thread_local! {
    /// The phase of the request loop running on this thread, null elsewhere.
    static PHASE: Cell<*const AtomicU8> = const { Cell::new(std::ptr::null()) };
}

extern "C" fn on_park_signal(_: libc::c_int) {
    // Reads a const-initialized thread-local without destructor (a plain TLS
    // access) and does one atomic compare-exchange: async-signal-safe, and
    // errno is untouched.
    let p = PHASE.with(Cell::get);
    if !p.is_null() {
        // SAFETY: a loop sets PHASE to its own `Arc<AtomicU8>` before it can
        // be signalled and clears it before that Arc can go (see `LoopGuard`);
        // the handler runs on that same thread, in between.
        let phase = unsafe { &*p };
        let _ = phase.compare_exchange(KICKED, READING, SeqCst, SeqCst);
    }
}

/// Installs the handler once per process.
fn install_handler() -> io::Result<()> {
    static INSTALLED: OnceLock<Result<(), (io::ErrorKind, String)>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let sig = park_signal();
            // SAFETY: `sa` is zero-initialized then filled with a valid
            // handler, an empty mask and flags without SA_RESTART (the read
            // must fail with EINTR); sigaction reads `sa` and writes `old`,
            // both exclusively borrowed locals.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                    let e = io::Error::last_os_error();
                    return Err((e.kind(), e.to_string()));
                }
                if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
                    return Err((
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "signal {sig} (fuser::park_signal) already has a handler; \
                             fuser needs it to wake parked request loops"
                        ),
                    ));
                }
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_park_signal as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                sa.sa_flags = 0;
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                    let e = io::Error::last_os_error();
                    return Err((e.kind(), e.to_string()));
                }
            }
            Ok(())
        })
        .clone()
        .map_err(|(kind, msg)| io::Error::new(kind, msg))
}

/// What the loops are told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Serve,
    Park,
    Release,
}

#[derive(Debug)]
struct Slot {
    thread: libc::pthread_t,
    phase: Arc<AtomicU8>,
    parked: bool,
}

#[derive(Debug)]
struct State {
    command: Command,
    /// Set by `Session::run`: how many /dev/fuse loops it starts.
    expected: Option<usize>,
    /// Loops that ever registered.
    registered: usize,
    /// Live loops, by registration number.
    loops: Vec<(usize, Slot)>,
    /// Why parking cannot work on this session, if it cannot.
    unsupported: Option<&'static str>,
    /// A `park` returned Ok and no `unpark` followed.
    parked: bool,
}

/// Shared between a session's loops and its [`Pauser`]s.
#[derive(Debug)]
pub(crate) struct ParkCtl {
    /// Read by every loop before every read: the only hot-path cost besides
    /// the phase.
    requested: AtomicBool,
    state: Mutex<State>,
    changed: Condvar,
    /// The session's io_uring queues, parked after the loops.
    #[cfg(target_os = "linux")]
    pub(crate) rings: crate::uring::RingCtl,
}

impl ParkCtl {
    pub(crate) fn new() -> Arc<ParkCtl> {
        Arc::new(ParkCtl {
            requested: AtomicBool::new(false),
            state: Mutex::new(State {
                command: Command::Serve,
                expected: None,
                registered: 0,
                loops: Vec::new(),
                unsupported: None,
                parked: false,
            }),
            changed: Condvar::new(),
            #[cfg(target_os = "linux")]
            rings: Default::default(),
        })
    }

    /// Called by `Session::run` before it starts `loops` /dev/fuse loops.
    pub(crate) fn start(&self, loops: usize, unsupported: Option<&'static str>) {
        let mut s = self.state.lock();
        s.expected = Some(loops);
        s.unsupported = unsupported;
        self.changed.notify_all();
    }

    /// Whether the loops ended because of `Pauser::release`.
    pub(crate) fn released(&self) -> bool {
        self.state.lock().command == Command::Release
    }

    /// Registers the calling thread as a request loop until the guard drops.
    pub(crate) fn enter_loop(self: &Arc<Self>) -> LoopGuard {
        let phase = Arc::new(AtomicU8::new(BUSY));
        PHASE.with(|p| p.set(Arc::as_ptr(&phase)));
        // SAFETY: unblocks one signal in this thread's own mask; `set` is an
        // initialized local sigset_t.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, park_signal());
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
        let mut s = self.state.lock();
        let id = s.registered;
        s.registered += 1;
        s.loops.push((
            id,
            Slot {
                // SAFETY: pthread_self has no preconditions.
                thread: unsafe { libc::pthread_self() },
                phase: phase.clone(),
                parked: false,
            },
        ));
        self.changed.notify_all();
        LoopGuard {
            ctl: self.clone(),
            id,
            phase,
        }
    }

    fn slot(s: &mut State, id: usize) -> Option<&mut Slot> {
        s.loops.iter_mut().find(|(i, _)| *i == id).map(|(_, s)| s)
    }

    fn park(&self, timeout: Duration) -> io::Result<()> {
        // None: a timeout too long to represent, i.e. none.
        let deadline = Instant::now().checked_add(timeout);
        let mut s = self.state.lock();
        if let Some(why) = s.unsupported {
            return Err(io::Error::new(io::ErrorKind::Unsupported, why));
        }
        if s.command == Command::Release {
            return Err(io::Error::other("session already released"));
        }
        // Before the first signal can be sent.
        install_handler()?;
        s.command = Command::Park;
        self.requested.store(true, SeqCst);
        loop {
            if s.command != Command::Park {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "unparked or released while parking",
                ));
            }
            let all_started = s.expected.is_some_and(|n| s.registered >= n);
            if all_started && s.loops.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the session's request loops have ended",
                ));
            }
            if all_started && s.loops.iter().all(|(_, l)| l.parked) {
                s.parked = true;
                #[cfg(target_os = "linux")]
                {
                    drop(s);
                    let deadline = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
                    if let Err(e) = self.rings.park(deadline) {
                        self.unpark();
                        return Err(e);
                    }
                }
                return Ok(());
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                Self::serve(&mut s, &self.requested);
                self.changed.notify_all();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "request loops did not park in time (a handler still running?); serving again",
                ));
            }
            for (_, l) in s.loops.iter().filter(|(_, l)| !l.parked) {
                if l.phase
                    .compare_exchange(READING, KICKED, SeqCst, SeqCst)
                    .is_ok()
                {
                    // SAFETY: `l.thread` is a live thread: a loop deregisters
                    // under this lock before its thread ends.
                    let rc = unsafe { libc::pthread_kill(l.thread, park_signal()) };
                    if rc != 0 {
                        // Not sent: give the loop back its way out of KICKED.
                        l.phase.store(READING, SeqCst);
                    }
                }
            }
            let wait = deadline.map_or(RESEND_EVERY, |d| RESEND_EVERY.min(d - now));
            self.changed.wait_for(&mut s, wait);
        }
    }

    fn serve(s: &mut State, requested: &AtomicBool) {
        s.command = Command::Serve;
        s.parked = false;
        requested.store(false, SeqCst);
    }

    fn unpark(&self) {
        let mut s = self.state.lock();
        if s.command == Command::Park {
            Self::serve(&mut s, &self.requested);
            self.changed.notify_all();
            #[cfg(target_os = "linux")]
            self.rings.unpark();
        }
    }

    #[cfg(target_os = "linux")]
    fn seal_rings(&self, timeout: Duration) -> io::Result<Vec<crate::uring::RingEntry>> {
        let parked = {
            let s = self.state.lock();
            s.command == Command::Park && s.parked
        };
        if !parked {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "sealing the io_uring queues needs a successful park first",
            ));
        }
        self.rings.seal(Instant::now() + timeout)
    }

    fn release(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        if s.command == Command::Release {
            return Ok(());
        }
        if !(s.command == Command::Park && s.parked) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "release needs a successful park first",
            ));
        }
        #[cfg(target_os = "linux")]
        if !self.rings.sealed() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "release of a session with io_uring queues needs `seal_rings` first",
            ));
        }
        s.command = Command::Release;
        self.changed.notify_all();
        #[cfg(target_os = "linux")]
        self.rings.release();
        Ok(())
    }
}

/// A request loop's registration; deregisters on drop.
pub(crate) struct LoopGuard {
    ctl: Arc<ParkCtl>,
    id: usize,
    phase: Arc<AtomicU8>,
}

/// What a loop does after it was told to park.
pub(crate) enum AfterPark {
    Serve,
    Exit,
}

impl LoopGuard {
    /// Called before each read: whether to park first. On `false` the loop
    /// is `READING` and must call `read_returned` after its read.
    #[inline]
    pub(crate) fn before_read(&self) -> bool {
        self.phase.store(READING, SeqCst);
        if self.ctl.requested.load(SeqCst) {
            self.read_returned();
            return true;
        }
        false
    }

    /// Leaves `READING`; waits while a park signal is on its way to this
    /// thread, so that it never lands during a dispatch.
    #[inline]
    pub(crate) fn read_returned(&self) {
        while self
            .phase
            .compare_exchange(READING, BUSY, SeqCst, SeqCst)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }

    /// Parks this loop until unparked or released.
    pub(crate) fn park(&self) -> AfterPark {
        let mut s = self.ctl.state.lock();
        loop {
            let command = s.command;
            let mut now_parked = false;
            if let Some(slot) = ParkCtl::slot(&mut s, self.id) {
                let parked = command != Command::Serve;
                now_parked = parked && !slot.parked;
                slot.parked = parked;
            }
            match command {
                Command::Serve => return AfterPark::Serve,
                Command::Release => return AfterPark::Exit,
                Command::Park => {
                    // Only a change is news to `park`: parked loops that
                    // woke each other would spin through the pause, on
                    // the CPUs the successor needs.
                    if now_parked {
                        self.ctl.changed.notify_all();
                    }
                    self.ctl.changed.wait(&mut s);
                }
            }
        }
    }
}

impl Drop for LoopGuard {
    fn drop(&mut self) {
        let mut s = self.ctl.state.lock();
        s.loops.retain(|(i, _)| *i != self.id);
        self.ctl.changed.notify_all();
        drop(s);
        PHASE.with(|p| p.set(std::ptr::null()));
    }
}

/// Parks and releases a session's /dev/fuse request loops, for handing its
/// connection to a successor process (`Session::resume` there).
///
/// The handover: `park`; give the successor the /dev/fuse fd (a dup of
/// `Session::as_fd`) and `Session::negotiated`; the successor resumes and
/// sends `Notifier::resend` before it runs; then `release` here, and
/// `Session::run` returns without `Filesystem::destroy`. If the successor
/// fails, `unpark`.
///
/// Between `park` and the successor's resend, replies the file system still
/// holds must be neither sent nor dropped (a dropped reply answers `EIO`):
/// the resend gives those requests to the successor, and a reply sent after
/// it by this process finds no request and is refused by the kernel.
#[derive(Debug, Clone)]
pub struct Pauser {
    pub(crate) ctl: Arc<ParkCtl>,
}

impl Pauser {
    /// Stops every /dev/fuse request loop from taking requests and returns
    /// once all of them are parked: none is reading or dispatching a
    /// request (one already read is dispatched first, never dropped). Their
    /// fds stay open. The io_uring queues, if any, stop dispatching and
    /// committing too (`seal_rings` comes next). Fails with `Unsupported`
    /// on a session that cannot park, `TimedOut` (after going back to
    /// serving) if a loop did not park within `timeout`, `NotConnected` if
    /// the loops have ended.
    pub fn park(&self, timeout: Duration) -> io::Result<()> {
        self.ctl.park(timeout)
    }

    /// After `park`, on a session served through FUSE over io_uring: makes
    /// every entry of the queues hold a request (none armed in this
    /// process's rings, whose teardown would lose a request given to one)
    /// and seals them; returns the entries, for the successor's
    /// `Session::adopt_ring_entries`. Call once requests this process
    /// handed to other threads are answered: a reply given after this is
    /// kept aside, and the successor serves that request again. Empty on
    /// a session without queues. Needs `Session::set_ring_root` (the
    /// requests that fill the entries are made there).
    #[cfg(target_os = "linux")]
    pub fn seal_rings(&self, timeout: Duration) -> io::Result<Vec<crate::uring::RingEntry>> {
        self.ctl.seal_rings(timeout)
    }

    /// Parked loops serve again (the successor failed).
    pub fn unpark(&self) {
        self.ctl.unpark()
    }

    /// Parked loops exit and drop their fds, and `Session::run` returns
    /// `Ok(())` without calling `Filesystem::destroy`: the connection goes
    /// on in the successor. Call only after the successor's
    /// `FUSE_NOTIFY_RESEND`. Fails unless a `park` succeeded (and no
    /// `unpark` followed).
    pub fn release(&self) -> io::Result<()> {
        self.ctl.release()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::fd::FromRawFd;
    use std::os::fd::OwnedFd;

    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a valid out-array of two ints.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: pipe returned two fresh fds that nothing else owns.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// A loop like the session's, reading one byte at a time from a pipe
    /// (a blocking read(2) as on /dev/fuse), and "dispatching" each with an
    /// interruptible sleep that must never see the park signal.
    #[test]
    fn parks_a_loop_blocked_in_read_and_never_signals_a_dispatch() {
        let ctl = ParkCtl::new();
        ctl.start(1, None);
        let (r, w) = pipe();
        let pauser = Pauser { ctl: ctl.clone() };
        let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let lp = {
            let ctl = ctl.clone();
            let served = served.clone();
            std::thread::spawn(move || {
                let guard = ctl.enter_loop();
                loop {
                    if guard.before_read() {
                        match guard.park() {
                            AfterPark::Serve => continue,
                            AfterPark::Exit => return,
                        }
                    }
                    let mut b = [0u8; 1];
                    // SAFETY: reads into a valid one-byte buffer.
                    let n = unsafe { libc::read(r.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
                    let errno = io::Error::last_os_error().raw_os_error();
                    guard.read_returned();
                    if n < 0 {
                        assert_eq!(errno, Some(libc::EINTR));
                        continue;
                    }
                    assert_eq!(n, 1);
                    let ts = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 20_000,
                    };
                    // SAFETY: a valid timespec and a null remainder.
                    let rc = unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
                    assert_eq!(rc, 0, "the park signal interrupted a dispatch");
                    served.fetch_add(1, SeqCst);
                }
            })
        };
        let stop = Arc::new(AtomicBool::new(false));
        let wfd = w.as_raw_fd();
        let writer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    // SAFETY: writes one byte from a valid buffer to the
                    // pipe, which `w` keeps open until after the join.
                    unsafe { libc::write(wfd, [7u8].as_ptr().cast(), 1) };
                    std::thread::sleep(Duration::from_micros(30));
                }
            })
        };
        for _ in 0..500 {
            pauser.park(Duration::from_secs(30)).unwrap();
            let before = served.load(SeqCst);
            pauser.unpark();
            // Each round parks a loop that was serving.
            while served.load(SeqCst) == before {
                std::thread::yield_now();
            }
        }
        stop.store(true, SeqCst);
        writer.join().unwrap();
        // The writer is gone: the loop is blocked in read with nothing to
        // come, and only the signal can park it.
        pauser.park(Duration::from_secs(30)).unwrap();
        pauser.release().unwrap();
        lp.join().unwrap();
        drop(w);
        assert!(ctl.released());
    }

    /// A loop still dispatching when the time is up: park fails, the
    /// session serves on, and a later park succeeds.
    #[test]
    fn a_park_that_times_out_goes_back_to_serving() {
        let ctl = ParkCtl::new();
        ctl.start(1, None);
        let pauser = Pauser { ctl: ctl.clone() };
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let (in_tx, in_rx) = std::sync::mpsc::channel::<()>();
        let dispatched = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let lp = {
            let ctl = ctl.clone();
            let dispatched = dispatched.clone();
            std::thread::spawn(move || {
                let guard = ctl.enter_loop();
                loop {
                    if guard.before_read() {
                        match guard.park() {
                            AfterPark::Serve => continue,
                            AfterPark::Exit => return,
                        }
                    }
                    // Stands for a read that always has a request.
                    std::thread::yield_now();
                    guard.read_returned();
                    if dispatched.load(SeqCst) == 0 {
                        // A handler that runs until the test lets it go.
                        in_tx.send(()).unwrap();
                        go_rx.recv().unwrap();
                    }
                    dispatched.fetch_add(1, SeqCst);
                }
            })
        };
        in_rx.recv().unwrap();
        let e = pauser.park(Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(pauser.release().is_err(), "not parked");
        go_tx.send(()).unwrap();
        // Serves on after the failed park.
        while dispatched.load(SeqCst) < 10 {
            std::thread::yield_now();
        }
        pauser.park(Duration::from_secs(30)).unwrap();
        pauser.release().unwrap();
        lp.join().unwrap();
    }

    #[test]
    fn refuses_unsupported_sessions_and_release_without_park() {
        let ctl = ParkCtl::new();
        ctl.start(1, Some("unsupported"));
        let pauser = Pauser { ctl };
        let e = pauser.park(Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert_eq!(
            pauser.release().unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
