//! POSIX semantics of memfs at the VOP level, without FUSE.
//!
//! # Modules
//! `names.rs` holds what the namespace does (create, link, rename,
//! rmdir, tmpfiles, whiteouts, concurrent renames), `listing.rs` how a
//! listing meets a directory changing under it, `data.rs` file contents
//! (sparse files, unlinked files, ENOSPC, vnode recycling) and
//! `attrs.rs` times, owners, xattrs and ACLs. The memfs they test is made
//! here.

#[path = "../common/mod.rs"]
mod common;

mod attrs;
mod data;
mod listing;
mod names;

use std::sync::Arc;
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_vfs::{Ctx, FileSystem, VnodeRef};
use uvfs_vnode::{Config, VnodeLayer};

const C: Ctx = Ctx::ROOT;

fn memfs(limit: Option<u64>) -> Arc<MemFs> {
    memfs_with_layer(limit, Config::with_limit(1024))
}

fn memfs_with_layer(limit: Option<u64>, cfg: Config) -> Arc<MemFs> {
    let layer = VnodeLayer::new(cfg);
    MemFs::new(
        layer,
        MemFsConfig {
            size_limit: limit,
            ..Default::default()
        },
    )
}

fn file(fs: &MemFs, dir: &VnodeRef, name: &str) -> VnodeRef {
    fs.create(&C, dir, name.as_bytes(), 0o644, libc::O_RDWR)
        .unwrap()
        .0
}
