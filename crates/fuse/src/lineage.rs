//! A server's place in the line of servers of its mount: how many came
//! before it (live upgrades, `upgrade/`), how long requests waited at the
//! last hand-over, and whether this one handed the mount on. Reported by
//! `uvfs stat` (`server.*`).

use std::sync::atomic::{AtomicBool, AtomicU64};

/// The server's place in the line of servers of its mount.
#[derive(Default, Debug)]
pub struct Lineage {
    /// Servers before this one (0: this one mounted it).
    pub generation: AtomicU64,
    /// Times the mount's server was replaced without unmounting.
    pub restarts: AtomicU64,
    /// How long requests waited at the last hand-over, microseconds.
    pub last_pause_us: AtomicU64,
    /// This server handed its mount over and is leaving: it must not
    /// remove what the successor now owns (the control socket's file).
    pub handed_over: AtomicBool,
}
