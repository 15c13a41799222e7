//! The uvfs FUSE server: serves any `uvfs_vfs::FileSystem` through the
//! kernel's FUSE interface, using fuser 0.18.
//!
//! # Pieces
//! - `server.rs`: the fuser `Filesystem` implementation (request ->
//!   VOP -> reply).
//! - `nodes.rs`: node id -> (vnode hold, kernel lookup count): the one
//!   place where FUSE's LOOKUP/FORGET protocol becomes vnode holds.
//! - `handles.rs`: open files as vnode use references; `backing.rs`
//!   the backing files the kernel reads and writes itself.
//! - `mount.rs`: mounting with several request loops (`n_threads`,
//!   `clone_fd`) or serving a given channel (`serve_fd`), `kmount.rs` mount(2) and unmounting only our own mount, `signals.rs` clean unmount on SIGINT/SIGTERM,
//!   `daemon.rs` detaching.
//! - `control.rs` and `stats.rs`: the control socket behind `uvfs stat`.
//! - `refresh.rs`: listed directories' attributes fetched again in the
//!   background, so a `stat` after a listing needs no round trip.
//! - `changes.rs`: host changes a file system reports, turned into
//!   the notifications that make the kernel forget exactly those;
//!   `entry_race.rs` tells when a LOOKUP reply may have raced them
//!   (public only under `--cfg loom`, for its model test).
//! - `lockwait.rs` and `offload.rs`: requests answered off the request
//!   loops (lock waits; syncs that wait for a disk), `threads.rs` what
//!   their threads must not inherit.

mod backing;
mod caller_caps;
mod changes;
mod control;
mod convert;
mod daemon;
#[cfg(not(loom))]
mod entry_race;
#[cfg(loom)]
pub mod entry_race;
mod evict;
mod fileattr;
mod handles;
mod ioctl;
mod kmount;
mod lockwait;
mod mount;
mod mountinfo;
mod nodes;
mod offload;
mod prune;
mod refresh;
mod release;
mod server;
mod signals;
mod stats;
mod sync;
mod threads;
mod uring_offer;
mod write_stall;

pub use control::{query, socket_path, CONTROL_DIR};
pub use daemon::{daemonize, Readiness};
pub use mount::{serve, serve_fd, BackgroundMount, ServeConfig, MOUNT_FLAGS};
pub use nodes::ROOT_ID;
pub use release::set_memory_release;
pub use server::{Server, Timeouts, MAX_WRITE};
pub use signals::BlockedSignals;
pub use stats::human as format_stats;
pub use uring_offer::{offer_uring, UringOffer, URING_PARAMETER};

/// Whether this kernel serves FUSE over io_uring (`ServeConfig::uring`):
/// Linux 6.14+ with the `fuse` module's `enable_uring` parameter on.
pub fn uring_available() -> bool {
    fuser::uring_enabled_in_kernel()
}
