//! The server itself: concurrent clients, a mount dropped while busy or
//! replaced while its server ends, requests it must survive, and the
//! counters it reports.

use crate::common::{self, serve_memfs, Mnt};
use crate::cstr;
use std::fs;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn concurrent_clients() {
    let Some(m) = Mnt::new(None) else { return };
    let m = Arc::new(m);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let m = m.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    let p = m.p(&format!("t{t}-{}", i % 20));
                    fs::write(&p, format!("{t}:{i}")).unwrap();
                    let q = m.p(&format!("moved-{}", i % 7));
                    let _ = fs::rename(&p, &q);
                    let _ = fs::remove_file(m.p(&format!("moved-{}", (i + 3) % 7)));
                    let _ = fs::read_dir(&m.dir).unwrap().count();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let r = m.report(false);
    assert_eq!(r["counters"]["fuse.requests.panics"], 0);
    // The kernel sends RELEASE asynchronously after close() returns: wait
    // for the last ones to arrive (a bound on waiting, not on speed).
    let mut open = r["counters"]["fuse.handles.open"].clone();
    for _ in 0..500 {
        if open == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        open = m.report(false)["counters"]["fuse.handles.open"].clone();
    }
    assert_eq!(open, 0, "every open handle released");
    fs::write(m.p("after"), b"ok").unwrap();
}

#[test]
fn a_mount_dropped_while_busy_leaves_the_tree() {
    // Dropping a BackgroundMount that a process still uses (a failing
    // test's unwinding, say) must not leave the mount in place, dead once
    // this process exits: it is detached, and its user keeps its file.
    if let Err(why) = common::fuse_usable() {
        eprintln!("SKIP: {why}");
        return;
    }
    let dir = std::env::temp_dir().join(format!("uvfs-fuse-busy-drop-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let m = serve_memfs(&dir, None, 1024);
    fs::write(dir.join("f"), b"still here").unwrap();
    let mut held = fs::File::open(dir.join("f")).unwrap();
    drop(m);
    let listed = uvfs_fuse::mount_entry(&dir).is_some();
    let mut data = String::new();
    let read = held.read_to_string(&mut data);
    drop(held);
    if listed {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&dir)
            .status();
    }
    let _ = fs::remove_dir(&dir);
    assert!(!listed, "the busy mount stayed in the tree");
    read.unwrap();
    assert_eq!(data, "still here");
}

/// `umount MNT; uvfs mount MNT` while the first server is still on its
/// way out: the old server must not unmount the new mount when its
/// session ends or when asked to unmount (an unmount by path would take
/// the new one, whose server then serves nothing). The old mount is
/// detached while a file is open, so it ends only when the test closes
/// that file, after the new mount is up.
#[test]
fn ended_server_leaves_a_new_mount_alone() {
    let Some(mut m) = Mnt::new(None) else { return };
    let old = m.mount.take().unwrap();
    let held = fs::File::create(m.p("old")).unwrap();
    // SAFETY: the path is a valid NUL-terminated string.
    assert_eq!(
        unsafe { libc::umount2(cstr(&m.dir).as_ptr(), libc::MNT_DETACH) },
        0
    );
    let new = serve_memfs(&m.dir, None, 4096);
    fs::write(m.p("new"), b"new").unwrap();
    // Closing the last file of the detached mount destroys it: the old
    // server's request loops end, then it is asked to unmount.
    drop(held);
    old.unmount()
        .expect("unmount of an already unmounted server");
    assert_eq!(fs::read(m.p("new")).unwrap(), b"new");
    assert!(!m.p("old").exists());
    m.mount = Some(new);
}

#[test]
fn extreme_times_do_not_stop_the_server() {
    // Any file's owner may ask for any tv_sec (the VFS clamps it to
    // -(2^63 - 1) s here); fuser 0.18's release panicked decoding the far
    // ends in its request loop (third_party/fuser/PATCHED.md).
    let Some(m) = Mnt::new(None) else { return };
    fs::write(m.p("f"), b"x").unwrap();
    let path = m.p("f");
    // Off the test thread: a dead request loop leaves the call waiting for
    // good, which must fail the test, not hang it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let c = cstr(&path);
        for (sec, nsec) in [(i64::MIN, 1), (i64::MIN, 0), (i64::MAX, 999_999_999)] {
            let ts = [
                libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                libc::timespec {
                    tv_sec: sec,
                    tv_nsec: nsec,
                },
            ];
            // SAFETY: a NUL-terminated path and two timespecs. Whatever the
            // answer, the server must go on answering.
            unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) };
            let _ = fs::metadata(&path);
        }
        let _ = tx.send(fs::read(&path).ok());
    });
    let got = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the server stopped answering");
    assert_eq!(got.as_deref(), Some(&b"x"[..]));
    assert_eq!(m.report(false)["counters"]["fuse.requests.panics"], 0);
}

/// Every counter of the server's subsystems is in the report, with a
/// description: `uvfs stat` readers (scripts, the benchmarks, the tests
/// here and in uvfs-cli) look them up by name.
#[test]
fn the_report_names_every_subsystem_counter() {
    let Some(m) = Mnt::new(None) else { return };
    let r = m.report(false);
    let mut want: Vec<String> = [
        "fuse.changes.entries fuse.changes.everything fuse.changes.failed fuse.changes.inodes",
        "fuse.changes.repeated fuse.evict.kept fuse.evict.max_vnodes fuse.evict.passes",
        "fuse.evict.prune fuse.evict.queued fuse.evict.sent fuse.evict.throttled",
        "fuse.handles.open fuse.kernel_io fuse.kernel_io.closes_seen fuse.kernel_io.open_files",
        "fuse.kernel_io.open_files_server fuse.kernel_io.opens fuse.kernel_io.refused",
        "fuse.kernel_io.registered fuse.kernel_io.written_files fuse.locks.waiting",
        "fuse.nodes fuse.nodes.forget_excess",
        "fuse.nodes.forgotten fuse.nodes.lookups fuse.nodes.released fuse.nodes.remembered",
        "fuse.offload.threads fuse.refresh.clones fuse.refresh.dropped fuse.refresh.followed fuse.refresh.names",
        "fuse.refresh.queued fuse.refresh.refreshed fuse.refresh.stale fuse.refresh.unavailable",
        "fuse.refresh.uncached fuse.refresh.unknown fuse.refresh.untracked fuse.refresh.waiting",
        "fuse.requests fuse.requests.errors fuse.requests.offloaded fuse.requests.panics",
        "fuse.requests.uring fuse.uring fuse.writes.stalled mount.vnodes mount.vnodes.active",
        "mount.vnodes.free process.cpu_us process.rss_bytes server.generation",
        "server.journal.bytes server.journal.entries server.journal.grown",
        "server.journal.unrecorded server.last_pause_us server.restarts server.supervised",
    ]
    .join(" ")
    .split(' ')
    .map(String::from)
    .collect();
    let ops = "lookup getattr readdirplus readdir read write opendir releasedir open release \
               flush create tmpfile mknod mkdir unlink rmdir setattr rename link symlink \
               readlink access statfs fsync fsyncdir fallocate getxattr setxattr listxattr \
               removexattr copy_file_range lseek getlk setlk ioctl statx other";
    want.extend(
        ops.split_whitespace()
            .map(|op| format!("fuse.requests.op.{op}")),
    );
    want.sort();
    let counters = r["counters"].as_object().unwrap();
    let mut got: Vec<String> = counters
        .keys()
        .filter(|k| {
            ["fuse.", "mount.", "server.", "process."]
                .iter()
                .any(|p| k.starts_with(p))
        })
        // Only where this process offered io_uring (`uvfs mount` does).
        .filter(|k| !k.starts_with("fuse.uring.switch"))
        .cloned()
        .collect();
    got.sort();
    assert_eq!(got, want);
    for k in counters.keys() {
        assert!(counters[k].is_u64(), "{k}: {}", counters[k]);
        let d = r["descriptions"][k].as_str().unwrap_or("");
        assert!(!d.is_empty(), "{k} has no description");
    }
    // The memfs and vnode layer's own counters come along.
    assert!(counters.contains_key("memfs.data.bytes"), "{counters:?}");
    assert!(counters.contains_key("vfs.numvnodes"), "{counters:?}");
}
