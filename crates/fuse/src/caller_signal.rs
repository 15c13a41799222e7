//! Whether a request's caller has a signal waiting for it: how a lock wait
//! whose INTERRUPT never came is still ended.
//!
//! A caller waiting for a request's answer that gets a signal makes the
//! kernel send INTERRUPT naming the request, if the request has reached
//! the server by then (`FR_SENT`). Over /dev/fuse the kernel closes the
//! gap: a request read after the signal came is followed by its
//! INTERRUPT. Over FUSE over io_uring it does not (Linux 6.18,
//! `fuse_uring_prepare_send` marks the request sent without looking for
//! a signal that came while it was on its way to a ring entry): a signal
//! in that window is never told to the server, and the caller waits on,
//! past even SIGKILL, until the request is answered. For most requests
//! that is a moment; for a lock wait it is until the lock goes, and if
//! the caller's own process holds that lock (its other threads took it,
//! and a process's locks go only when its last thread has closed its
//! files) it is never: a process that cannot be killed and a mount that
//! cannot be unmounted. So the lock waiter also looks, now and then, at
//! each waiting caller's pending signals, and ends the wait with `EINTR`
//! where one is there: what the INTERRUPT would have done.
//!
//! A request carries the caller's thread id in the server's pid namespace
//! (0 where the caller's is not visible: then nothing can be read, and
//! the wait ends only as the kernel ends it). The thread cannot exit
//! while it waits for the answer, so the id names it until then.

use std::fs;

/// SIGKILL's bit in a signal set (signal n is bit n-1): never blocked.
const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);

/// Whether thread `tid` has a signal pending that it does not block: one
/// that, were it not waiting on us, would interrupt its system call.
/// False if the thread cannot be read.
pub(crate) fn pending(tid: u32) -> bool {
    if tid == 0 {
        return false;
    }
    let Ok(status) = fs::read_to_string(format!("/proc/{tid}/status")) else {
        return false;
    };
    unblocked_pending(&status).is_some_and(|set| set != 0)
}

/// The pending signals (the thread's own and its process's) not blocked,
/// from a `/proc/TID/status`; None if the fields are not there.
fn unblocked_pending(status: &str) -> Option<u64> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    };
    let pending = field("SigPnd:")? | field("ShdPnd:")?;
    let blocked = field("SigBlk:")? & !SIGKILL_BIT;
    Some(pending & !blocked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::process::Signal;
    use std::process::{Child, Command};

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().unwrap()
    }

    fn signal(child: &Child, sig: Signal) {
        let pid = rustix::process::Pid::from_child(child);
        rustix::process::kill_process(pid, sig).unwrap();
    }

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !cond() {
            assert!(std::time::Instant::now() < deadline, "timed out: {what}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// A stopped process keeps a signal sent to it pending until it goes
    /// on: the state a caller waiting on a request is in.
    #[test]
    fn a_signal_held_pending_is_seen_and_none_is_not() {
        let mut c = sleeper();
        let tid = c.id();
        assert!(!pending(tid), "a sleeping process has nothing pending");
        signal(&c, Signal::STOP);
        wait_for("the stop", || {
            fs::read_to_string(format!("/proc/{tid}/stat")).is_ok_and(|s| s.contains(") T "))
        });
        assert!(!pending(tid));
        signal(&c, Signal::TERM);
        wait_for("the pending SIGTERM", || pending(tid));
        signal(&c, Signal::KILL);
        let _ = c.wait();
        assert!(!pending(tid), "a reaped process is read as nothing pending");
    }

    #[test]
    fn blocked_signals_do_not_count_but_sigkill_always_does() {
        let status = |pnd: u64, shd: u64, blk: u64| {
            format!("Name:\tx\nSigPnd:\t{pnd:016x}\nShdPnd:\t{shd:016x}\nSigBlk:\t{blk:016x}\n")
        };
        let usr1 = 1u64 << (libc::SIGUSR1 - 1);
        assert_eq!(unblocked_pending(&status(0, 0, 0)), Some(0));
        assert_eq!(unblocked_pending(&status(usr1, 0, 0)), Some(usr1));
        assert_eq!(unblocked_pending(&status(0, usr1, 0)), Some(usr1));
        assert_eq!(unblocked_pending(&status(usr1, 0, usr1)), Some(0));
        assert_eq!(
            unblocked_pending(&status(0, SIGKILL_BIT, u64::MAX)),
            Some(SIGKILL_BIT)
        );
        assert_eq!(unblocked_pending("Name:\tx\n"), None);
    }
}
