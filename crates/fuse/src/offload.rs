//! Requests that may wait for a disk, answered off the io_uring queues.
//!
//! An io_uring queue thread serves its CPU's requests one at a time
//! (`uring.rs`): while it waits in a passthrough's `fsync` of a large
//! file on a slow disk, every other request from programs on that CPU (a
//! shell's `stat`) waits too, where /dev/fuse had `--threads` loops to
//! share them. So on a file system that may wait for a device
//! (`FileSystem::waits_for_devices`) FSYNC, FSYNCDIR, FALLOCATE,
//! COPY_FILE_RANGE, and READs whose data is not in memory (`read_nowait`
//! said `EAGAIN`) are handed to the threads here and answered from them
//! (fuser passes a reply sent from another thread back to its queue), and
//! the queue thread goes on with its next request. So are an UNLINK,
//! RENAME, SETATTR of a size, O_TRUNC OPEN or RELEASE that would end a
//! large file's storage, which the backing file system frees in the call
//! (`FileSystem::may_free_much`): freeing gigabytes can take ext4 most of
//! a second, which a `stat` from the same CPU would wait out (figures in
//! docs/results.md, "FUSE over io_uring"). So is an OPEN that would
//! wait for another process to give up a lease on the file
//! (`FileSystem::open_nowait` said `EAGAIN`), over /dev/fuse too: the
//! holder may take the host's whole `lease-break-time`, and a few such
//! opens would take every /dev/fuse loop. The kernel still orders
//! what it must: an fsync holds its inode's lock, so the file's writes
//! wait for it whichever thread serves it.
//!
//! # Threads
//! Started on demand, one whenever the jobs waiting outnumber the idle
//! threads, up to [`MAX_WORKERS`]; each leaves after [`IDLE`] without
//! work, so an idle server keeps none. Jobs beyond that wait in order. A
//! job is never lost: if no thread can be started and none runs, it runs
//! on the caller's thread, as it would without the pool.

use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

/// Most threads at once; further jobs queue. Generous, because jobs are
/// served in order: an uncached read queued behind syncs waits for them
/// (a database's commits), and an idle thread costs nothing for long.
pub(crate) const MAX_WORKERS: usize = 16;
/// How long a thread waits for work before it leaves.
pub(crate) const IDLE: Duration = Duration::from_secs(5);

/// A request's whole handling, reply included.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The pool (one per server).
pub(crate) struct Offload {
    shared: Arc<Shared>,
    idle_for: Duration,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    /// Signalled when the last running job ends with none queued
    /// (`wait_idle`); apart from `cv`, whose `notify_one` must wake a
    /// worker.
    drained: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Threads running (busy or waiting for work).
    workers: usize,
    /// Threads waiting for work.
    idle: usize,
    /// Jobs being run now.
    running: usize,
    /// The pool is dropped: threads leave once the queue is empty.
    shutdown: bool,
}

impl Default for Offload {
    fn default() -> Offload {
        Offload::with_idle(IDLE)
    }
}

impl Offload {
    /// A pool whose threads leave after `idle_for` without work.
    pub(crate) fn with_idle(idle_for: Duration) -> Offload {
        Offload {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                cv: Condvar::new(),
                drained: Condvar::new(),
            }),
            idle_for,
        }
    }

    /// Runs `job` on a pool thread (or, if none can be had, here).
    pub(crate) fn run(&self, job: Job) {
        let mut st = self.shared.state.lock();
        st.jobs.push_back(job);
        // Waiting jobs outnumber the threads waiting to take them: one
        // more thread. (A thread that is between taking a job and waiting
        // again is not counted idle; at worst one extra thread starts.)
        if st.jobs.len() > st.idle && st.workers < MAX_WORKERS {
            let (shared, idle_for) = (self.shared.clone(), self.idle_for);
            let spawned = std::thread::Builder::new()
                .name("uvfs-offload".into())
                .spawn(move || worker(shared, idle_for));
            match spawned {
                Ok(_) => st.workers += 1,
                Err(_) if st.workers == 0 => {
                    let job = st.jobs.pop_back().expect("pushed above");
                    drop(st);
                    return job();
                }
                Err(_) => {}
            }
        }
        drop(st);
        self.shared.cv.notify_one();
    }

    /// Waits until no job is queued or running, for at most `limit`;
    /// false if some still were then. A live upgrade (`upgrade/`) waits
    /// for the requests handed here before it saves the server's state:
    /// each would change it.
    pub(crate) fn wait_idle(&self, limit: Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        let mut st = self.shared.state.lock();
        while !(st.jobs.is_empty() && st.running == 0) {
            if self
                .shared
                .drained
                .wait_until(&mut st, deadline)
                .timed_out()
            {
                return st.jobs.is_empty() && st.running == 0;
            }
        }
        true
    }

    /// Threads running now.
    pub(crate) fn workers(&self) -> usize {
        self.shared.state.lock().workers
    }
}

impl Drop for Offload {
    fn drop(&mut self) {
        self.shared.state.lock().shutdown = true;
        self.shared.cv.notify_all();
    }
}

fn worker(shared: Arc<Shared>, idle_for: Duration) {
    crate::threads::detach_from_creator();
    let mut st = shared.state.lock();
    loop {
        if let Some(job) = st.jobs.pop_front() {
            st.running += 1;
            drop(st);
            // The server's handlers catch their own panics (answered EIO);
            // this keeps a stray one from taking the thread's count along.
            let _ = catch_unwind(AssertUnwindSafe(job));
            st = shared.state.lock();
            st.running -= 1;
            if st.jobs.is_empty() && st.running == 0 {
                shared.drained.notify_all();
            }
            continue;
        }
        if st.shutdown {
            break;
        }
        st.idle += 1;
        let timed_out = shared.cv.wait_for(&mut st, idle_for).timed_out();
        st.idle -= 1;
        if timed_out && st.jobs.is_empty() {
            break;
        }
    }
    st.workers -= 1;
}

impl crate::report::Counted for Offload {
    fn report(&self, out: &mut crate::report::Report) {
        out.put(
            "fuse.offload.threads",
            self.workers() as u64,
            "Offload threads running now (they leave after 5 s without work)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    const WAIT: Duration = Duration::from_secs(20);

    #[test]
    fn jobs_that_block_do_not_hold_up_the_next_ones() {
        let pool = Offload::default();
        // MAX_WORKERS jobs that each wait to be released, then one more
        // that must still run once they are: all of them at once would need
        // every thread.
        let (started_tx, started) = mpsc::channel();
        let mut releases = Vec::new();
        for i in 0..MAX_WORKERS {
            let (tx, rx) = mpsc::channel::<()>();
            releases.push(tx);
            let started_tx = started_tx.clone();
            pool.run(Box::new(move || {
                started_tx.send(i).unwrap();
                rx.recv_timeout(WAIT).expect("released");
            }));
        }
        let mut seen: Vec<usize> = (0..MAX_WORKERS)
            .map(|_| started.recv_timeout(WAIT).expect("every job runs at once"))
            .collect();
        seen.sort();
        assert_eq!(seen, (0..MAX_WORKERS).collect::<Vec<_>>());
        assert_eq!(pool.workers(), MAX_WORKERS);
        let (done_tx, done) = mpsc::channel();
        pool.run(Box::new(move || done_tx.send(()).unwrap()));
        assert_eq!(pool.workers(), MAX_WORKERS, "no thread beyond the cap");
        releases.into_iter().for_each(|r| r.send(()).unwrap());
        done.recv_timeout(WAIT).expect("the queued job runs");
    }

    #[test]
    fn pool_threads_inherit_no_pin_or_idle_policy() {
        // Started from a thread pinned to one CPU at SCHED_IDLE, as an
        // io_uring queue thread may be.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            // SAFETY: a zeroed cpu_set_t with CPU 0 set is a valid set;
            // the param is valid for SCHED_IDLE; pid 0 is this thread.
            unsafe {
                let mut one: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut one);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one);
                let p = libc::sched_param { sched_priority: 0 };
                libc::sched_setscheduler(0, libc::SCHED_IDLE, &p);
            }
            let pool = Offload::default();
            pool.run(Box::new(move || {
                // SAFETY: a zeroed cpu_set_t is valid for the kernel to fill.
                let (policy, cpus) = unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
                    (libc::sched_getscheduler(0), libc::CPU_COUNT(&set))
                };
                tx.send((policy, cpus)).unwrap();
            }));
            std::thread::sleep(Duration::from_millis(50));
        });
        let (policy, cpus) = rx.recv_timeout(WAIT).unwrap();
        // SAFETY: sysconf has no preconditions.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        assert_eq!(policy, libc::SCHED_OTHER);
        assert_eq!(
            i64::from(cpus),
            online as i64,
            "the pool thread stayed pinned"
        );
    }

    #[test]
    fn a_panicking_job_loses_no_thread_and_idle_threads_leave() {
        let pool = Offload::with_idle(Duration::from_millis(20));
        pool.run(Box::new(|| panic!("a job that panics")));
        let (tx, rx) = mpsc::channel();
        for i in 0..10 {
            let tx = tx.clone();
            pool.run(Box::new(move || tx.send(i).unwrap()));
        }
        let mut got: Vec<i32> = (0..10).map(|_| rx.recv_timeout(WAIT).unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        let deadline = std::time::Instant::now() + WAIT;
        while pool.workers() > 0 {
            assert!(std::time::Instant::now() < deadline, "threads stay");
            std::thread::sleep(Duration::from_millis(5));
        }
        // And a pool with no thread left starts one again.
        pool.run(Box::new(move || tx.send(99).unwrap()));
        assert_eq!(rx.recv_timeout(WAIT).unwrap(), 99);
    }
}
