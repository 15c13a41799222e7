//! Targeted cases about record and flock locks on a file system that
//! keeps them (passthrough).

use crate::kernel::Kernel;
use crate::wire::{
    b, interrupt_in, lock_in, open_in, release_in, u64_at, FLUSH, HEADER, INTERRUPT, OPEN, RELEASE,
    ROOT, SETLK, SETLKW,
};

/// Locks of a file system that keeps them (passthrough): a SETLKW that
/// meets a conflict is answered only when the lock is free, or with EINTR
/// once the kernel interrupts it, even if the INTERRUPT came first; a
/// FLUSH drops its owner's locks.
pub(crate) fn locks(k: &mut Kernel) {
    const EOF: u64 = i64::MAX as u64;
    let (f, h1) = k.create(ROOT, b"locked");
    let h2 = u64_at(&k.call(OPEN, f, &open_in(libc::O_RDWR)).body, 0);
    for flock in [false, true] {
        let held = k.call(SETLK, f, &lock_in(h1, 1, 0, EOF, libc::F_WRLCK, flock));
        assert!(held.ok(), "{}lock refused: {}", k.tag, held.error);
        let other = lock_in(h2, 2, 0, EOF, libc::F_WRLCK, flock);
        k.expect_err(SETLK, f, &other, &[libc::EAGAIN]);
        // Parked: nothing comes back for it before the next STATFS.
        let waiting = k.send(SETLKW, f, &other);
        if let Some(r) = k.drain_until_statfs(waiting, "a SETLKW on a held lock") {
            k.fail(&format!(
                "a SETLKW on a held lock was answered: {}",
                r.error
            ));
        }
        let intr = k.next_unique() | 1;
        let msg = k.message(
            INTERRUPT,
            intr,
            0,
            (HEADER + 8) as u32,
            &interrupt_in(waiting),
        );
        k.send_raw(&msg);
        let r = k.recv_for(waiting, "an interrupted SETLKW");
        assert_eq!(r.error, -libc::EINTR, "{}interrupted SETLKW", k.tag);
        // An INTERRUPT that overtakes its request.
        let intr = k.next_unique() | 1;
        let next = k.unique + 2;
        let msg = k.message(INTERRUPT, intr, 0, (HEADER + 8) as u32, &interrupt_in(next));
        k.send_raw(&msg);
        let early = k.send(SETLKW, f, &other);
        assert_eq!(early, next);
        let r = k.recv_for(early, "a SETLKW interrupted before it came");
        assert_eq!(r.error, -libc::EINTR, "{}early-interrupted SETLKW", k.tag);
        // A caller with a signal pending whose INTERRUPT never comes (as
        // FUSE over io_uring can lose it): the wait still ends, EINTR.
        let signalled = SignalledCaller::new();
        let own = std::mem::replace(&mut k.pid, signalled.pid());
        let lost = k.send(SETLKW, f, &other);
        k.pid = own;
        let r = k.recv_for(lost, "a SETLKW whose caller has a signal pending");
        assert_eq!(
            r.error,
            -libc::EINTR,
            "{}SETLKW of a signalled caller",
            k.tag
        );
        drop(signalled);
        // Released, the wait ends with the lock.
        let waiting = k.send(SETLKW, f, &other);
        if k.drain_until_statfs(waiting, "a SETLKW on a held lock")
            .is_some()
        {
            k.fail("a SETLKW on a held lock was answered");
        }
        assert!(k
            .call(SETLK, f, &lock_in(h1, 1, 0, EOF, libc::F_UNLCK, flock))
            .ok());
        let r = k.recv_for(waiting, "a SETLKW once the lock was free");
        assert!(r.ok(), "{}SETLKW after the unlock: {}", k.tag, r.error);
        if flock {
            assert!(k
                .call(SETLK, f, &lock_in(h2, 2, 0, EOF, libc::F_UNLCK, true))
                .ok());
        } else {
            // A close (FLUSH) by the owner drops its POSIX locks.
            assert!(k
                .call(FLUSH, f, &b().u64(h2).u32(0).u32(0).u64(2).done())
                .ok());
        }
        let again = k.call(SETLK, f, &lock_in(h1, 1, 0, EOF, libc::F_WRLCK, flock));
        assert!(again.ok(), "{}lock left behind: {}", k.tag, again.error);
        assert!(k
            .call(SETLK, f, &lock_in(h1, 1, 0, EOF, libc::F_UNLCK, flock))
            .ok());
    }
    assert!(k.call(RELEASE, f, &release_in(h1)).ok());
    assert!(k.call(RELEASE, f, &release_in(h2)).ok());
}

/// A process with a signal pending that it does not block: stopped, then
/// sent SIGTERM, which waits until it goes on (killed when dropped).
struct SignalledCaller(std::process::Child);

impl SignalledCaller {
    fn new() -> Self {
        use rustix::process::{kill_process, Pid, Signal};
        let c = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = Pid::from_child(&c);
        kill_process(pid, Signal::STOP).unwrap();
        let status = format!("/proc/{}/status", c.id());
        let stopped = || std::fs::read_to_string(&status).is_ok_and(|s| s.contains("State:\tT"));
        while !stopped() {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        kill_process(pid, Signal::TERM).unwrap();
        SignalledCaller(c)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for SignalledCaller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
