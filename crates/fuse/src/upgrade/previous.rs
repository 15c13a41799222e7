//! The state layout of the previous version, which this build still
//! reads: a mount served by the build before this one can be upgraded to
//! it, live, and a supervisor of the build before can start it after a
//! crash. Without this, every change of the layout would make the first
//! upgrade to the new build an unmount, which is what live upgrade is
//! for avoiding.
//!
//! Version 4 is the whole server state in bincode, the nodes and the
//! file system's bytes inside it, in the field order below (bincode has
//! no field names: the order is the layout). The types are copies, frozen
//! here: `state.rs`'s may change with the next version, this layout may
//! not. `state.rs` turns it into its own (version 5 added what the
//! kernel's backing files still write, which version 4 had not; version 6
//! wrote the nodes and the file system's bytes after a small header).

use serde::{Deserialize, Serialize};

/// The previous version this build reads.
pub(crate) const VERSION: u32 = 4;

/// A node the kernel holds, as version 4 wrote it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub id: u64,
    pub ino: u64,
    pub count: u64,
}

/// An open file or directory, as version 4 wrote it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct Handle {
    pub fh: u64,
    pub ino: u64,
    pub fs_fh: u64,
    pub writable: bool,
    pub backing_node: Option<u64>,
    pub kernel_writer: bool,
    pub flags: i32,
    pub backing_id: Option<u32>,
}

/// The mount, as version 4 wrote it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct MountAt {
    pub mountpoint: std::path::PathBuf,
    pub device: Option<u64>,
    pub helper: bool,
}

/// The server state, as version 4 wrote it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub(crate) struct V4 {
    pub negotiated: Vec<u8>,
    pub no_opendir: bool,
    pub backings_on: bool,
    pub nodes: Vec<Node>,
    pub handles: Vec<Handle>,
    pub next_handle: u64,
    pub backings: Vec<(u64, Option<u32>, u64)>,
    pub mount: MountAt,
    pub generation: u64,
    pub restarts: u64,
    pub parked_at_ns: u64,
    pub counters: Vec<(String, u64)>,
    pub fs_format: String,
    pub fs_bytes: Vec<u8>,
    pub fs_fds: u32,
    pub app: Vec<u8>,
    pub journal: bool,
    pub journal_live: bool,
    pub link: bool,
    pub ring: Vec<(u16, u64, bool)>,
    pub kept: Vec<(u64, Vec<u8>)>,
}

/// Reads a version-4 state's bytes (after its magic and version).
pub(crate) fn decode(b: &[u8]) -> Result<V4, bincode::Error> {
    bincode::deserialize(b)
}
