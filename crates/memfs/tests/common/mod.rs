//! Helpers shared by memfs's integration tests.

use uvfs_memfs::MemFs;
use uvfs_vfs::{Fh, FileSystem, VnodeRef};

/// The names `readdir` lists in `dir`, `.` and `..` included.
pub fn names(fs: &MemFs, dir: &VnodeRef) -> Vec<String> {
    let mut out = Vec::new();
    fs.readdir(dir, Fh(0), 0, &mut |e| {
        out.push(String::from_utf8(e.name.clone()).unwrap());
        false
    })
    .unwrap();
    out
}
