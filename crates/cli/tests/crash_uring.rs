//! A passthrough mount served through FUSE over io_uring (the default
//! where the kernel offers it) has no crash supervisor: a request a dead
//! server's ring entry held cannot be answered by another process (the
//! kernel resends only /dev/fuse requests), so a new server would leave
//! its caller waiting forever. The mount says so, in `uvfs stat` and in
//! its log, and `--transport dev` mounts are supervised.

mod common;

use common::Mounted;

#[test]
fn an_io_uring_mount_says_it_is_not_supervised_and_why() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("uring-unsupervised", &["--source", "src"]);
    if m.counter("fuse.uring") == 0 {
        eprintln!("skipped: this kernel serves the mount through /dev/fuse");
        return;
    }
    assert_eq!(m.counter("server.supervised"), 0);
    let d = Mounted::new("dev-supervised", &["--transport", "dev", "--source", "src"]);
    assert_eq!(d.counter("server.supervised"), 1);
}
