//! Vnode cache limits and watermarks.
//!
//! # FreeBSD
//!
//! `desiredvnodes` (`kern.maxvnodes`), `wantfreevnodes` (desired / 4) and
//! the values derived by `vnlru_recalc`:
//!
//! * `gapvnodes = max(desiredvnodes - wantfreevnodes, 100)`
//! * `vhiwat = gapvnodes / 11` ("9% -- just under the 10% in vlrureclaim()")
//! * `vlowat = vhiwat / 2`
//!
//! FreeBSD lets the sysctls change them at run time under `vnode_list_mtx`;
//! here they are fixed at construction, so they are plain fields.

/// Upper bound FreeBSD puts on `desiredvnodes` (`MAXVNODES_MAX`, 8M).
pub const MAXVNODES_MAX: usize = 8 * 1024 * 1024;

/// Slack allowed over the limit by a speculative `vn_alloc` bump
/// (`VNLRU_COUNT_SLOP`, introduced by seed 000).
pub(crate) const VNLRU_COUNT_SLOP: usize = 100;

/// `max_free_per_call` (`vfs.vnode.vnlru.max_free_per_call`).
pub(crate) const MAX_FREE_PER_CALL: usize = 10_000;

/// Limits fixed at construction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tunables {
    pub desiredvnodes: usize,
    pub wantfreevnodes: usize,
    pub gapvnodes: usize,
    pub vhiwat: usize,
    pub vlowat: usize,
}

impl Tunables {
    /// `sysctl_maxvnodes` + `vnlru_recalc`.
    pub(crate) fn new(desiredvnodes: usize) -> Self {
        let desiredvnodes = desiredvnodes.clamp(1, MAXVNODES_MAX);
        let wantfreevnodes = desiredvnodes / 4;
        let gapvnodes = desiredvnodes.saturating_sub(wantfreevnodes).max(100);
        let vhiwat = gapvnodes / 11;
        let vlowat = vhiwat / 2;
        Self {
            desiredvnodes,
            wantfreevnodes,
            gapvnodes,
            vhiwat,
            vlowat,
        }
    }
}
