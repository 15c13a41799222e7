//! Helpers shared by the CLI's integration tests.

/// Ok when this process may mount FUSE file systems (root and a usable
/// /dev/fuse); otherwise why not, for the skip message.
pub fn can_mount() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(drop)
        .map_err(|e| format!("/dev/fuse: {e}"))
}
