//! A server's place in the line of servers of its mount: how many came
//! before it (live upgrades, `upgrade/`), how long requests waited at the
//! last hand-over, and whether this one handed the mount on. Reported by
//! `uvfs stat` (`server.*`).

use crate::report::{Counted, Report};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

impl Counted for Lineage {
    fn report(&self, out: &mut Report) {
        for (name, v, d) in [
            (
                "server.generation",
                &self.generation,
                "Servers of this mount before this one (live upgrades: `uvfs upgrade`)",
            ),
            (
                "server.restarts",
                &self.restarts,
                "Times the mount's server was replaced without unmounting",
            ),
            (
                "server.last_pause_us",
                &self.last_pause_us,
                "How long requests waited at the last replacement, microseconds",
            ),
        ] {
            out.put(name, v.load(Ordering::Relaxed), d);
        }
    }
}
