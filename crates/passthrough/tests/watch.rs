//! The host-change watcher (fanotify, as root) tells apart the changes
//! made behind the mount's back from the mount's own, a live upgrade's
//! successor's included. Skipped (with a message) where the source
//! cannot be watched.

mod common;

use common::env_with;
use parking_lot::Mutex;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uvfs_passthrough::PassthroughConfig;
use uvfs_vfs::{ChangeSink, FileSystem, Ino};

/// The names reported changed.
#[derive(Default)]
struct Names(Mutex<Vec<Vec<u8>>>);

impl ChangeSink for Names {
    fn entry_changed(&self, _dir: Ino, name: &[u8]) {
        self.0.lock().push(name.to_vec());
    }
    fn inode_changed(&self, _ino: Ino, _data: bool) {}
    fn everything_changed(&self) {}
}

/// `mkdir PATH` run by a process whose pid is known before it acts.
struct Mkdir(std::process::Child);

impl Mkdir {
    fn ready(path: &std::path::Path) -> Mkdir {
        Mkdir(
            Command::new("sh")
                .arg("-c")
                .arg("read go && exec mkdir \"$0\"")
                .arg(path)
                .stdin(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    }

    fn go(mut self) {
        writeln!(self.0.stdin.take().unwrap()).unwrap();
        assert!(self.0.wait().unwrap().success());
    }
}

/// A live upgrade's successor makes directories while the predecessor's
/// watcher still reads (it lives on briefly after the hand-over): taken
/// for the host's, they were invalidated in the kernel behind the
/// successor, and a program whose working directory was one of them
/// found `getcwd` failing (ENOENT). A change by anyone else is still
/// reported, during the upgrade and after it failed.
#[test]
fn a_successors_changes_are_the_mounts_own() {
    let e = env_with(
        "watch-successor",
        1000,
        PassthroughConfig {
            watch: true,
            ..PassthroughConfig::default()
        },
    );
    let names = Arc::new(Names::default());
    e.fs.watch(names.clone());
    if !e.fs.watch_status().active {
        eprintln!(
            "skipped: the source cannot be watched here ({:?})",
            e.fs.watch_status().why_not
        );
        return;
    }
    // The kernel holds the root: changes in it are worth reporting.
    e.root.ext_acquire(1);
    let src = e.src.path();
    let reported = |name: &[u8]| names.0.lock().iter().any(|n| n == name);
    let wait_reported = |name: &[u8]| {
        let t0 = Instant::now();
        while !reported(name) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the host's {} never reported",
                String::from_utf8_lossy(name)
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };

    let successor = Mkdir::ready(&src.join("by-successor"));
    e.fs.successor_running(Some(successor.0.id()));
    successor.go();
    Mkdir::ready(&src.join("by-host")).go();
    // Events are read in order: the successor's came first.
    wait_reported(b"by-host");
    assert!(
        !reported(b"by-successor"),
        "the successor's mkdir was reported"
    );

    // The upgrade failed: that process is nobody's now.
    let again = Mkdir::ready(&src.join("after-failure"));
    e.fs.successor_running(None);
    again.go();
    wait_reported(b"after-failure");
}

/// A file the mount has looked at and the host then removes is no longer
/// pinned by the server's cached descriptor, whether or not the kernel
/// still holds its node: the host's `rm` frees its space (`df` did not
/// move while the mount was up). A file open through the mount keeps it.
#[test]
fn a_file_removed_on_the_host_is_not_pinned_by_the_server() {
    let e = env_with(
        "watch-removed",
        1000,
        PassthroughConfig {
            watch: true,
            ..PassthroughConfig::default()
        },
    );
    e.fs.watch(Arc::new(Names::default()));
    if !e.fs.watch_status().active {
        eprintln!("skipped: the source cannot be watched here");
        return;
    }
    let src = e.src.path();
    std::fs::write(src.join("idle"), b"data").unwrap();
    std::fs::write(src.join("open"), b"data").unwrap();
    // Read once (as `cat` does), then idle.
    let idle = e.lookup(&e.root, "idle").unwrap();
    let fh = e.fs.open(&common::ROOT, &idle, libc::O_RDONLY).unwrap();
    assert_eq!(e.fs.read(&idle, fh, 0, 10).unwrap(), b"data");
    e.fs.release(&idle, fh).unwrap();
    e.fs.getattr(&idle).unwrap();
    assert_eq!(common::held_deleted(src), Vec::<String>::new());
    // Held by the kernel (its node counted) and not: both let go.
    idle.ext_acquire(1);
    let open = e.lookup(&e.root, "open").unwrap();
    let fh = e.fs.open(&common::ROOT, &open, libc::O_RDONLY).unwrap();
    // By another process: this one's changes are the mount's own.
    let rm = Command::new("rm")
        .arg(src.join("idle"))
        .arg(src.join("open"))
        .status()
        .unwrap();
    assert!(rm.success());
    let t0 = Instant::now();
    // The open file's own descriptor, and its node's.
    let only_open = || {
        let held = common::held_deleted(src);
        !held.is_empty() && held.iter().all(|h| h.ends_with("/open (deleted)"))
    };
    while !only_open() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "still pinned: {:?}",
            common::held_deleted(src)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(e.fs.read(&open, fh, 0, 10).unwrap(), b"data");
    e.fs.release(&open, fh).unwrap();
}

/// The files reported changed through a name in a directory, and how.
#[derive(Default)]
struct Through(Mutex<Vec<(Ino, Ino, bool)>>);

impl ChangeSink for Through {
    fn entry_changed(&self, _dir: Ino, _name: &[u8]) {}
    fn inode_changed(&self, _ino: Ino, _data: bool) {}
    fn changed_through(&self, dir: Ino, ino: Ino, data: bool) {
        self.0.lock().push((dir, ino, data));
    }
    fn everything_changed(&self) {}
}

/// A host's write of a file the kernel holds no node for, through a name
/// in a directory it holds, is reported with that directory: a LOOKUP
/// there may have read the file before the write, and its reply would
/// otherwise make the kernel's inode with the size from before it. Made
/// through a directory the kernel does not hold, nothing can be looking
/// the file up: it costs no report.
#[test]
fn a_write_through_a_held_directory_is_reported_with_it() {
    use std::os::unix::fs::MetadataExt;
    let e = env_with(
        "watch-through",
        1000,
        PassthroughConfig {
            watch: true,
            ..PassthroughConfig::default()
        },
    );
    let through = Arc::new(Through::default());
    e.fs.watch(through.clone());
    if !e.fs.watch_status().active {
        eprintln!("skipped: the source cannot be watched here");
        return;
    }
    e.root.ext_acquire(1);
    let src = e.src.path();
    // Made by this process: the mount's own changes, not reported.
    std::fs::write(src.join("f"), b"a").unwrap();
    std::fs::create_dir(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/g"), b"a").unwrap();
    let f = std::fs::metadata(src.join("f")).unwrap().ino();
    let g = std::fs::metadata(src.join("sub/g")).unwrap().ino();
    let sh = Command::new("sh")
        .arg("-c")
        .arg("echo b >> \"$0/sub/g\" && echo b >> \"$0/f\"")
        .arg(src)
        .status()
        .unwrap();
    assert!(sh.success());
    let root = e.root.ino();
    let t0 = Instant::now();
    while !through.0.lock().iter().any(|r| r.1 == f) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the host's write of f never reported: {:?}",
            through.0.lock()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let got = through.0.lock().clone();
    assert!(got.contains(&(root, f, true)), "{got:?}");
    // Events are read in order: g's came first.
    assert!(
        got.iter().all(|r| r.1 != g),
        "a write through a directory the kernel does not hold was reported: {got:?}"
    );
}
