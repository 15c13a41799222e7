//! One pass over one target: the parallel walk (`walk_all`), a watchdog
//! that kills a hung server so the walk fails instead of hanging, and
//! what the pass measured (`PassSample`). Nothing here knows about rows
//! or reports: a pass is a measurement, and `rows.rs` turns them into
//! results.

use super::targets::Target;
use super::PASS_LIMIT;
use crate::fuse_mount::{self, ServerSample};
use crate::procstat::{self, Peaks, Sampler};
use crate::walk::{self, TreeShape};
use std::io;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What one pass measured.
#[derive(Clone, Debug, Default)]
pub(super) struct PassSample {
    /// Until every walker stopped (finished or failed).
    pub(super) secs: f64,
    /// Entries the walkers statted.
    pub(super) entries: u64,
    /// Why the walk failed (an error, or fewer entries than the tree has).
    pub(super) error: Option<String>,
    pub(super) server: Option<ServerSample>,
    /// Nodes the kernel held when the walk began (`fuse.nodes`: about 1,
    /// the root, when a cold pass is cold).
    pub(super) nodes_at_start: Option<u64>,
    /// The server process's peaks during the walk.
    pub(super) peaks: Option<Peaks>,
    /// CPU time of the server process during the walk (from /proc, so the
    /// same for uvfs and the peers).
    pub(super) server_cpu_secs: Option<f64>,
    /// CPU time of the walkers (this process: their system calls include
    /// the kernel's side of FUSE, or the native file system's work).
    pub(super) walker_cpu_secs: f64,
}

/// What a walk of every subtree by `threads` walkers came to.
#[derive(Debug)]
pub(super) struct WalkOutcome {
    /// Until the last walker stopped.
    pub(super) secs: f64,
    /// Entries statted, by all walkers together.
    pub(super) seen: u64,
    /// The first error a walker met (each stops at its first).
    pub(super) error: Option<io::Error>,
}

/// One walk of every subtree by `threads` walkers.
pub(super) fn walk_all(root: &Path, shape: &TreeShape, threads: usize) -> WalkOutcome {
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|w| {
                let barrier = &barrier;
                sc.spawn(move || {
                    barrier.wait();
                    let mut n = 0;
                    for s in shape.subtrees_of(w, threads) {
                        if let Err(e) = walk::walk_counting(&root.join(format!("t{s}")), &mut n) {
                            return (n, Some(e));
                        }
                    }
                    (n, None)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut out = WalkOutcome {
            secs: 0.0,
            seen: 0,
            error: None,
        };
        for h in hs {
            let (n, e) = h
                .join()
                .unwrap_or_else(|_| (0, Some(io::Error::other("walker panicked"))));
            out.seen += n;
            if out.error.is_none() {
                out.error = e;
            }
        }
        out.secs = start.elapsed().as_secs_f64();
        out
    })
}

/// Runs `f`; if it has not returned within `limit`, kills `pid` (so a walk
/// blocked on a hung server fails instead of hanging the benchmark).
/// Returns `f`'s result and whether the server was killed.
pub fn with_watchdog<R>(pid: Option<u32>, limit: Duration, f: impl FnOnce() -> R) -> (R, bool) {
    let Some(pid) = pid else {
        return (f(), false);
    };
    let (done, wait) = mpsc::channel::<()>();
    std::thread::scope(|sc| {
        let dog = sc.spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limit) {
                // SAFETY: kill(2) with a valid signal and the pid of a child
                // of ours that is not reaped before the pass ends (its
                // ServerMount or PeerMount is borrowed by the pass), so the
                // pid cannot have been reused.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                return true;
            }
            false
        });
        let r = f();
        drop(done);
        (r, dog.join().unwrap_or(false))
    })
}

/// After a cache drop the kernel FORGETs the nodes a peer held and the peer
/// closes their fds, asynchronously: waits until its fd count has not
/// changed for 100 ms (at most 10 s), so a cold pass starts with those fds
/// given back (what `ServerMount::settle` does for uvfs with its counters).
pub(super) fn settle_fds(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut prev = procstat::fd_count(pid).ok();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        let now = procstat::fd_count(pid).ok();
        if now == prev {
            return;
        }
        prev = now;
    }
}

/// One pass over one target: (cold: drop caches first), walk, counters.
pub(super) fn pass(
    t: &Target,
    shape: &TreeShape,
    threads: usize,
    cold: bool,
) -> io::Result<PassSample> {
    if cold {
        fuse_mount::drop_kernel_caches()?;
    }
    let before = match &t.server {
        Some(s) if cold => Some(s.settle()?),
        Some(s) => Some(s.sample()?),
        None => None,
    };
    if let (Some(p), true) = (&t.peer, cold) {
        settle_fds(p.pid());
    }
    let nodes_at_start = before.as_ref().map(|b| b.nodes);
    let sampler = t
        .pid()
        .map(|pid| Sampler::start(pid, procstat::DEFAULT_PERIOD));
    let server_cpu = || {
        t.pid()
            .and_then(|p| procstat::process_cpu_secs_fine(p).ok())
    };
    let (scpu0, wcpu0) = (server_cpu(), crate::cputime::process_cpu());
    let (w, killed) = with_watchdog(t.pid(), PASS_LIMIT, || walk_all(&t.root, shape, threads));
    let walker_cpu_secs = crate::cputime::process_cpu()
        .saturating_sub(wcpu0)
        .as_secs_f64();
    let server_cpu_secs = scpu0.zip(server_cpu()).map(|(a, b)| (b - a).max(0.0));
    let peaks = sampler.map(Sampler::stop);
    let mut error = w.error.map(|e| e.to_string());
    if killed {
        error = Some(format!(
            "the pass took over {PASS_LIMIT:?}: server killed ({})",
            error.as_deref().unwrap_or("the walk then ended")
        ));
    }
    if error.is_none() && w.seen != shape.entries() {
        error = Some(format!(
            "the walk saw {} entries, the tree has {}",
            w.seen,
            shape.entries()
        ));
    }
    // A failed pass may have left the server dead: its counters are then
    // optional, not a reason to stop.
    let server = match (&t.server, before) {
        (Some(s), Some(b)) if error.is_none() => Some(b.delta(&s.sample()?)),
        (Some(s), Some(b)) => s.sample().ok().map(|a| b.delta(&a)),
        _ => None,
    };
    Ok(PassSample {
        secs: w.secs,
        entries: w.seen,
        error,
        server,
        nodes_at_start,
        peaks,
        server_cpu_secs,
        walker_cpu_secs,
    })
}
