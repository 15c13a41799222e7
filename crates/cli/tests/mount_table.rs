//! The server finds its own mount in `/proc/self/mountinfo` (its device,
//! owner and flags) among every other mount of the host. A path is bytes:
//! one mounted at a name that is not UTF-8 must hide nothing. A test
//! binary of its own, as such a mount is seen by every process on the
//! machine while it lasts.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::Command;

/// A tmpfs mounted at `path`, unmounted and removed on drop.
struct HostMount(PathBuf);

impl Drop for HostMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_host_mount_at_a_name_that_is_not_utf8_hides_no_other() {
    if let Err(why) = common::can_mount() {
        eprintln!("skipped: {why}");
        return;
    }
    let name = [
        b"uvfs-odd-\xff\xfe-".as_slice(),
        std::process::id().to_string().as_bytes(),
    ]
    .concat();
    let odd = std::env::temp_dir().join(OsStr::from_bytes(&name));
    std::fs::create_dir_all(&odd).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "uvfs-odd"])
        .arg(&odd)
        .status()
        .unwrap();
    assert!(st.success(), "mount -t tmpfs");
    let _host = HostMount(odd);

    // The server reads its device from the table to clone its mount for
    // directory attribute refreshes: the odd line must not fail the whole
    // read, which turns the refresh off ("the mount's device is
    // unknown").
    let m = common::Mounted::new("odd-table", &[]);
    assert_eq!(m.counter("fuse.refresh.clones"), 1);
    let log =
        std::fs::read_to_string(uvfs_fuse::fallback_log_path(&m.mnt).unwrap()).unwrap_or_default();
    assert!(!log.contains("device is unknown"), "{log}");
}
