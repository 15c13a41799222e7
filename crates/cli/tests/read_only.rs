//! `uvfs mount --read-only`, through the real binary: a passthrough whose
//! mount is read-only and whose reads leave the source's atimes alone; a
//! memfs, which would start empty and stay so, refused. Skipped (with a
//! message) where mounting is not possible.

mod common;

use common::{can_mount, Mounted};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::{Duration, UNIX_EPOCH};

#[test]
fn a_read_only_passthrough_reads_and_changes_nothing() {
    if let Err(why) = can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let m = Mounted::new("ro", &["--read-only", "--source", "src"]);
    let src = m.src();
    fs::write(src.join("f"), b"data").unwrap();
    // An atime a read would move (relatime: older than the mtime).
    let old = fs::FileTimes::new().set_accessed(UNIX_EPOCH + Duration::from_secs(1 << 30));
    fs::File::open(src.join("f"))
        .unwrap()
        .set_times(old)
        .unwrap();
    let atime = fs::metadata(src.join("f")).unwrap().atime();

    let entry = uvfs_fuse::mount_entry(&m.mnt).expect("mounted");
    assert!(entry.has_option("ro"), "mount options {}", entry.options);

    assert_eq!(fs::read(m.mnt.join("f")).unwrap(), b"data");
    let e = fs::write(m.mnt.join("g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let e = fs::OpenOptions::new()
        .append(true)
        .open(m.mnt.join("f"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert_eq!(
        fs::metadata(src.join("f")).unwrap().atime(),
        atime,
        "the read moved the source's atime"
    );
    assert!(!src.join("g").exists());

    let out = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .arg("stat")
        .arg(&m.mnt)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().next().unwrap_or("").ends_with("read-only"),
        "{text}"
    );
}

#[test]
fn a_read_only_memfs_is_refused() {
    let dir = std::env::temp_dir().join(format!("uvfs-cli-ro-memfs-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_uvfs"))
        .args(["mount", "--read-only"])
        .arg(&dir)
        .output()
        .unwrap();
    let _ = fs::remove_dir(&dir);
    assert!(!out.status.success(), "mounted: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--read-only serves a host directory"), "{err}");
}
