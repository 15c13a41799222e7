//! Shared by the mount tests.

#![allow(dead_code)]

/// Why FUSE cannot be mounted here, if it cannot (the tests then skip).
pub fn fuse_usable() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: mount(2) of FUSE needs root".into());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
        .map_err(|e| format!("/dev/fuse unusable: {e}"))
}
