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

/// Makes `path` a sparse file (data in pages 0 and 3 of 5) and returns
/// what `lseek(SEEK_DATA)` and `lseek(SEEK_HOLE)` answer from a set of
/// offsets: (offset, whence, result or -errno), to compare with a kernel
/// file system's answers.
pub fn sparse_seeks(path: &std::path::Path) -> Vec<(i64, i32, i64)> {
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;
    const P: u64 = 4096;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.write_all_at(&[1u8; P as usize], 0).unwrap();
    f.write_all_at(b"ten bytes!", 3 * P).unwrap();
    f.set_len(5 * P).unwrap();
    // Asked on a read-only descriptor with no writer left: while the file
    // is open for writing the server answers "all data" (a shared mapping
    // may hold dirty pages it has not seen).
    drop(f);
    let f = std::fs::File::open(path).unwrap();
    let mut out = Vec::new();
    for off in [
        0, 100, 4095, 4096, 5000, 12288, 12300, 16384, 20479, 20480, 30000,
    ] {
        for whence in [libc::SEEK_DATA, libc::SEEK_HOLE] {
            // SAFETY: plain integer arguments on an fd we hold.
            let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
            let r = if r < 0 {
                -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
            } else {
                r
            };
            out.push((off, whence, r));
        }
    }
    out
}
