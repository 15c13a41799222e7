//! Black-box tests: mount memfs through FUSE into a temp dir, use it with
//! std::fs and libc, unmount. Skipped (with a message) only where FUSE
//! cannot be mounted: no usable /dev/fuse or not root.
//!
//! # Modules
//! `names.rs` holds what the file system answers as tmpfs does (names,
//! links, renames, xattrs, times, set-ids, O_TMPFILE, ENOSPC, overlayfs
//! on top), `pages.rs` what meets the kernel's page cache (shared
//! mappings, SEEK_DATA, copy_file_range, closes, a running program's
//! text), `nodes.rs` the node table (FORGETs, eviction, file handles)
//! and `server.rs` the server itself (concurrent clients, a mount dropped
//! or replaced, requests it must survive, its counters). The mounts are
//! `common`'s `Mnt`.

#[path = "../common/mod.rs"]
mod common;

mod names;
mod nodes;
mod pages;
mod server;

use common::Mnt;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

/// Waits (bounded) until `f` holds for the mount's counters.
fn until_counters(m: &Mnt, what: &str, f: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = m.report(false);
        if f(&r["counters"]) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {}", r["counters"]);
        std::thread::sleep(Duration::from_millis(20));
    }
}
