//! `statx(2)` through a real mount reports a file's birth time, which only
//! FUSE_STATX carries: memfs's creation time, a passthrough's source's own
//! (on ext4 and on tmpfs), or none where the source has none. Skipped where
//! FUSE cannot be mounted.

mod common;

use common::{fuse_usable, Mnt};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vnode::{Config, VnodeLayer};

/// What `statx` says of `p` (not following a last symlink), asking for the
/// basic stats and the birth time, as `stat(1)` and Rust's std do.
fn statx(p: &Path) -> libc::statx {
    statx_with(p, 0)
}

/// [`statx`] with more `AT_*` flags (`AT_STATX_FORCE_SYNC`: ask the server
/// whatever the kernel has cached).
fn statx_with(p: &Path, flags: i32) -> libc::statx {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: an all-zero statx is a valid value of the plain C struct.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path, `st` a writable statx.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | flags,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
            &mut st,
        )
    };
    assert_eq!(
        r,
        0,
        "statx {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    st
}

/// The birth time, if `statx` reported one.
fn btime(st: &libc::statx) -> Option<(i64, u32)> {
    (st.stx_mask & libc::STATX_BTIME != 0).then_some((st.stx_btime.tv_sec, st.stx_btime.tv_nsec))
}

fn now() -> (i64, u32) {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (d.as_secs() as i64, d.subsec_nanos())
}

fn counter(m: &BackgroundMount, name: &str) -> u64 {
    m.report(false)["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}"))
}

#[test]
fn memfs_reports_when_each_file_was_made() {
    let Some(m) = Mnt::new(None) else { return };
    let before = now();
    fs::write(m.p("f"), b"x").unwrap();
    fs::create_dir(m.p("d")).unwrap();
    std::os::unix::fs::symlink("f", m.p("l")).unwrap();
    let after = now();
    let mut born = Vec::new();
    for name in ["f", "d", "l"] {
        let st = statx(&m.p(name));
        let b = btime(&st).unwrap_or_else(|| panic!("{name}: no STATX_BTIME"));
        assert!(
            before <= b && b <= after,
            "{name}: born {b:?}, made in {before:?}..{after:?}"
        );
        born.push(b);
    }
    assert!(counter(m.mount.as_ref().unwrap(), "fuse.requests.op.statx") > 0);

    // Changes move mtime and ctime, never the birth time, as the server
    // says when asked again past the kernel's cache.
    fs::write(m.p("f"), b"changed").unwrap();
    fs::set_permissions(
        m.p("f"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let asked = counter(m.mount.as_ref().unwrap(), "fuse.requests.op.statx");
    let st = statx_with(&m.p("f"), libc::AT_STATX_FORCE_SYNC);
    assert_eq!(
        counter(m.mount.as_ref().unwrap(), "fuse.requests.op.statx"),
        asked + 1
    );
    assert_eq!(btime(&st), Some(born[0]));
    assert!((st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec) >= born[0]);
    assert_eq!(st.stx_size, 7);

    // A renamed file keeps its birth time; a new one under the old name
    // has its own.
    fs::rename(m.p("f"), m.p("g")).unwrap();
    fs::write(m.p("f"), b"").unwrap();
    assert_eq!(btime(&statx(&m.p("g"))), Some(born[0]));
    assert!(btime(&statx(&m.p("f"))).unwrap() >= born[0]);
}

/// A passthrough of `src` mounted on `mnt`.
fn serve_passthrough(src: &Path, mnt: &Path) -> BackgroundMount {
    let layer = VnodeLayer::new(Config::with_limit(4096));
    let fs = PassthroughFs::new(layer.clone(), src, PassthroughConfig::default()).unwrap();
    let ttl = Duration::from_millis(200);
    let cfg = ServeConfig {
        timeouts: Timeouts {
            entry: ttl,
            attr: ttl,
        },
        fsname: "uvfs-statx".into(),
        uring: common::uring(),
        mount_flags: 0,
        ..ServeConfig::new(mnt.to_path_buf())
    };
    BackgroundMount::start(fs, layer, &cfg).expect("mount")
}

/// Through a passthrough of `src`, every file's birth time is its source
/// file's, to the nanosecond, or absent where the source has none: made
/// on the host, made through the mount, a directory, a symlink.
fn passthrough_shows_the_sources_birth_times(src: &Path, mnt: &Path) {
    fs::write(src.join("host"), b"").unwrap();
    let mount = serve_passthrough(src, mnt);
    fs::write(mnt.join("made"), b"").unwrap();
    fs::create_dir(mnt.join("dir")).unwrap();
    std::os::unix::fs::symlink("made", mnt.join("link")).unwrap();
    let source_has_btime = btime(&statx(&src.join("host"))).is_some();
    for name in ["host", "made", "dir", "link"] {
        let (theirs, ours) = (statx(&src.join(name)), statx(&mnt.join(name)));
        assert_eq!(btime(&ours), btime(&theirs), "{name}");
        assert_eq!(btime(&ours).is_some(), source_has_btime, "{name}");
        assert_eq!(ours.stx_ino, theirs.stx_ino, "{name}");
    }
    assert!(counter(&mount, "fuse.requests.op.statx") > 0);
    mount.unmount().unwrap();
}

/// A fresh `src` and `mnt` under `base`.
fn dirs(base: &Path) -> (PathBuf, PathBuf) {
    let _ = fs::remove_dir_all(base);
    let (src, mnt) = (base.join("src"), base.join("mnt"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&mnt).unwrap();
    (src, mnt)
}

#[test]
fn passthrough_of_a_disk_file_system_shows_its_birth_times() {
    if let Err(why) = fuse_usable() {
        eprintln!("SKIP: {why}");
        return;
    }
    // Under /var/tmp: a disk file system (ext4 here, which keeps btime).
    let base = PathBuf::from(format!("/var/tmp/uvfs-statx-{}", std::process::id()));
    let (src, mnt) = dirs(&base);
    passthrough_shows_the_sources_birth_times(&src, &mnt);
    fs::remove_dir_all(&base).unwrap();
}

#[test]
fn passthrough_of_a_tmpfs_shows_its_birth_times() {
    if let Err(why) = fuse_usable() {
        eprintln!("SKIP: {why}");
        return;
    }
    let base = std::env::temp_dir().join(format!("uvfs-statx-tmpfs-{}", std::process::id()));
    let (src, mnt) = dirs(&base);
    let c = CString::new(src.as_os_str().as_bytes()).unwrap();
    // SAFETY: NUL-terminated strings; a null data pointer is allowed.
    let r = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            c"size=16m".as_ptr().cast(),
        )
    };
    if r != 0 {
        eprintln!(
            "SKIP: cannot mount a tmpfs: {}",
            std::io::Error::last_os_error()
        );
        let _ = fs::remove_dir_all(&base);
        return;
    }
    passthrough_shows_the_sources_birth_times(&src, &mnt);
    // SAFETY: `c` is the NUL-terminated path mounted above.
    assert_eq!(unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) }, 0);
    fs::remove_dir_all(&base).unwrap();
}
