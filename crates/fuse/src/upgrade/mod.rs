//! Live upgrade: a running server hands its mount to a successor process
//! (`uvfs upgrade`), which goes on serving the same kernel connection, so
//! that programs using the mount notice nothing: open files, working
//! directories, mappings and locks stay valid, and no request fails.
//!
//! # How
//! 1. The predecessor starts the successor binary with one end of a
//!    socket pair and waits for its hello (a successor that cannot start
//!    changes nothing).
//!    A successor that says it takes them gets the nodes the kernel
//!    holds first, while requests are still served (`ahead.rs`).
//! 2. It parks its request loops (`fuser::Pauser`: requests meanwhile
//!    wait in the kernel), waits for requests handed to other threads,
//!    and saves its state: the nodes the kernel holds with their lookup
//!    counts, open handles, backing ids, counters, and the file system's
//!    own state (`FileSystem::save`). It sends that with a duplicate of
//!    the `/dev/fuse` descriptor and the file system's descriptors.
//! 3. The successor rebuilds the file system and the server around the
//!    same node ids and handles, starts its request loops on the
//!    connection, and sends `FUSE_NOTIFY_RESEND`: requests the
//!    predecessor had read and not answered (a lock wait) come again.
//! 4. The predecessor closes its descriptors and exits; if anything
//!    failed before the successor took the connection, it unparks and
//!    serves on, and the caller learns why.
//!
//! FUSE over io_uring: after step 2 the queues are filled and sealed
//! (`fuser::Pauser::seal_rings`): every ring entry holds a request, none
//! is armed in the rings that close with this process; the entries'
//! memfds go with the state, and the successor maps them at the same
//! addresses and answers what they hold (docs/design/upgrade.md).
//!
//! # Pieces
//! - `wire.rs`: frames with descriptors over the socket pair.
//! - `state.rs`: the server's state and its versioned encoding.
//! - `ahead.rs`: the nodes sent before the loops park, and the changes
//!   that bring them up to date after.
//! - `previous.rs`: the previous version's layout, still read.
//! - `predecessor.rs`: the handing side, started from the control socket.
//! - `successor.rs`: the taking side.
//! - `kept_ring.rs`: how a supervisor files a server's io_uring entries.

mod ahead;
pub(crate) mod kept_ring;
pub(crate) mod predecessor;
mod previous;
pub(crate) mod state;
mod successor;
pub(crate) mod wire;

pub use predecessor::{upgrade, Successor, Upgradable, UpgradeReport};
pub(crate) use state::MountState;
pub(crate) use successor::import;
pub use successor::{receive, Handoff};

/// The argument that starts a binary as a successor: `BINARY __takeover FD`.
pub const TAKEOVER_ARG: &str = "__takeover";
