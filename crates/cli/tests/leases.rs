//! A lease another process holds on a source file: the server's open of
//! that file, for a caller through the mount, waits until the holder lets
//! the lease go (or the host's `lease-break-time` runs out). That wait
//! must hold up no one else: over FUSE over io_uring a queue thread serves
//! its CPU's requests one at a time, and every other caller on that CPU
//! would wait with it.

mod common;

use common::{on_cpu0, stat_on_cpu0, uring_passthrough};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn an_open_waiting_for_a_host_lease_holds_up_no_other_request() {
    let break_time: u64 = fs::read_to_string("/proc/sys/fs/lease-break-time")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if break_time < 30 {
        eprintln!("skipped: lease-break-time is {break_time} s, too short to tell a wait apart");
        return;
    }
    let Some(m) = uring_passthrough("leases") else {
        return;
    };
    let on_host = m.scratch.join("src/leased");
    fs::write(&on_host, b"before").unwrap();
    // The break of our lease signals us (SIGIO by default, which would
    // end the test process).
    // SAFETY: ignoring a signal installs no handler.
    unsafe { libc::signal(libc::SIGIO, libc::SIG_IGN) };
    let holder = fs::File::open(&on_host).unwrap();
    // SAFETY: a valid descriptor; F_SETLEASE takes an int.
    let r = unsafe { libc::fcntl(holder.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) };
    assert_eq!(r, 0, "F_SETLEASE: {}", std::io::Error::last_os_error());

    // An open for writing through the mount breaks the read lease, and
    // waits for us to let it go.
    let (otx, orx) = mpsc::channel();
    let through_mount = m.mnt.join("leased");
    std::thread::spawn(move || {
        on_cpu0();
        let r = OpenOptions::new()
            .write(true)
            .open(&through_mount)
            .and_then(|mut f| f.write_all(b"after!"));
        let _ = otx.send(r.map_err(|e| e.kind()));
    });
    common::wait_for("the lease's break to start", || {
        // SAFETY: a valid descriptor; F_GETLEASE takes no argument.
        let now = unsafe { libc::fcntl(holder.as_raw_fd(), libc::F_GETLEASE) };
        now == libc::F_UNLCK
    });

    // Meanwhile a caller on the same CPU is answered.
    let answered = stat_on_cpu0(&m, Duration::from_secs(20));
    let opened_early = orx.try_recv().ok();
    drop(holder);
    assert_eq!(
        answered,
        Ok(Err(std::io::ErrorKind::NotFound)),
        "a stat on the opener's CPU was not answered while the open waited for the lease"
    );
    assert_eq!(opened_early, None, "the open did not wait for the lease");
    // Once the lease is gone, the open goes on.
    let opened = orx
        .recv_timeout(Duration::from_secs(20))
        .expect("the open never ended");
    assert_eq!(opened, Ok(()));
    assert_eq!(fs::read(&on_host).unwrap(), b"after!");

    // A caller who asked not to wait is answered as the host would
    // answer it.
    let holder = fs::File::open(&on_host).unwrap();
    // Refused while the writer's backing descriptor is open: the kernel
    // sends the RELEASE that closes it after the writer's close returns.
    common::wait_for("a second lease", || {
        // SAFETY: as above.
        unsafe { libc::fcntl(holder.as_raw_fd(), libc::F_SETLEASE, libc::F_RDLCK) == 0 }
    });
    let nonblocking = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(m.mnt.join("leased"));
    assert_eq!(
        nonblocking.map(drop).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock)
    );
}
