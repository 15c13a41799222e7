//! Crash recovery of a passthrough mount served as a user gets it by
//! default: through FUSE over io_uring where the kernel offers it. A test
//! binary of its own: other tests' children, forked while this one kills
//! its server, would close their inherited copies of its files (a FLUSH
//! each), and a request a dead server's ring entry holds is not sent
//! again (the kernel's FUSE_NOTIFY_RESEND covers /dev/fuse only), so
//! this test kills its server only when the mount is idle.

mod common;

use common::{kill_server, still_serves, wait_for, waiting, Mounted};
use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};

#[test]
fn a_crash_of_an_idle_default_passthrough_leaves_a_working_mount() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("crash-default", &["--source", "src"]);
    assert_eq!(m.counter("server.supervised"), 1);
    let p = m.mnt.join("f");
    fs::write(&p, b"before").unwrap();
    let mut f = OpenOptions::new().read(true).write(true).open(&p).unwrap();
    for g in 1..=3 {
        // Idle: the closes' RELEASEs (sent in the background) answered.
        wait_for("the mount to be idle", || {
            waiting(&m).is_none_or(|w| w == 0)
        });
        kill_server(&m);
        assert_eq!(m.counter("server.generation"), g);
        f.seek(SeekFrom::End(0)).unwrap();
        f.write_all(format!(" {g}").as_bytes()).unwrap();
        still_serves(&m, &format!("after{g}"));
    }
    let mut s = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "before 1 2 3");
    assert_eq!(fs::read_to_string(m.src().join("f")).unwrap(), s);
}
