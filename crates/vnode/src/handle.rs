//! The two kinds of reference a vnode's users hold: a use (an active
//! user; FreeBSD's `vref`) and a hold (kept from recycling; `vhold`).
//! Each is a counted `Arc<Vnode>` whose drop gives its count back, so a
//! reference can neither leak its count nor outlive its vnode.

use crate::refs::{Acquired, HOLD_ONE, USE_ONE};
use crate::sync::{Arc, Ordering};
use crate::vnode::Vnode;
use std::fmt;
use std::ops::Deref;

/// A use reference (FreeBSD's `vget`/`vref` ... `vrele`): the holder is an
/// active user. Clone takes another; drop releases it.
pub struct VnodeRef {
    vp: Arc<Vnode>,
}

impl VnodeRef {
    /// Wraps an `Arc` whose use was already counted in `refs`.
    pub(crate) fn from_counted(vp: Arc<Vnode>) -> Self {
        VnodeRef { vp }
    }

    /// Takes a hold (FreeBSD's `vhold`): pins the vnode without keeping it
    /// active. Never fails: a used vnode is not free, so no list work.
    pub fn hold(&self) -> HoldRef {
        self.vp.refs.inc(HOLD_ONE);
        HoldRef {
            vp: self.vp.clone(),
        }
    }

    /// The shared vnode (e.g. to key maps by identity).
    pub fn arc(&self) -> &Arc<Vnode> {
        &self.vp
    }

    /// Whether two references name the same vnode object.
    pub fn ptr_eq(a: &VnodeRef, b: &VnodeRef) -> bool {
        Arc::ptr_eq(&a.vp, &b.vp)
    }

    /// Counts `n` more external references (see [`Vnode::ext_count`]);
    /// returns whether there were none before. The 0 -> nonzero edge
    /// takes a hold, so the vnode is not recycled while any is counted.
    ///
    /// Racing with `ext_release` taking the count to 0: each edge moves
    /// the hold count by exactly one, in whatever order the two land, and
    /// our use reference keeps the vnode off the free list meanwhile, so
    /// the hold count is one exactly while the count is nonzero once both
    /// are done.
    ///
    /// The count saturates: wrapped past `u64::MAX` (a caller's bogus
    /// count), it would read as few or none while the hold stayed, and
    /// the next release would take the hold of a vnode still counted.
    pub fn ext_acquire(&self, n: u64) -> bool {
        let before = match self
            .vp
            .ext
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                Some(c.saturating_add(n))
            }) {
            Ok(c) | Err(c) => c,
        };
        if before == 0 && n > 0 {
            self.vp.refs.inc(HOLD_ONE);
        }
        before == 0
    }

    /// Gives back up to `n` external references; on reaching 0 the hold
    /// taken by `ext_acquire` goes. Returns how many were counted before,
    /// so that a caller can tell an excess release (more than counted,
    /// clamped to what was) from a normal one.
    pub fn ext_release(&self, n: u64) -> u64 {
        let mut cur = self.vp.ext.load(Ordering::Acquire);
        loop {
            if cur == 0 {
                return 0;
            }
            let new = cur.saturating_sub(n);
            match self
                .vp
                .ext
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    if new == 0 {
                        self.vp.release(HOLD_ONE);
                    }
                    return cur;
                }
                Err(now) => cur = now,
            }
        }
    }
}

impl Clone for VnodeRef {
    fn clone(&self) -> Self {
        // We already hold a use, so the vnode is not free: no list work.
        // Counted even if a forced unmount doomed it meanwhile, so the
        // clone's drop balances (the original is just as stale).
        self.vp.refs.inc(USE_ONE);
        VnodeRef {
            vp: self.vp.clone(),
        }
    }
}

impl Drop for VnodeRef {
    fn drop(&mut self) {
        self.vp.release(USE_ONE);
    }
}

impl Deref for VnodeRef {
    type Target = Vnode;
    fn deref(&self) -> &Vnode {
        &self.vp
    }
}

impl fmt::Debug for VnodeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.vp.fmt(f)
    }
}

/// A hold reference (FreeBSD's `vhold` ... `vdrop`): keeps the vnode from
/// being recycled without counting as a user. The FUSE server keeps one per
/// node the kernel remembers; the name cache keeps one per directory with
/// entries.
pub struct HoldRef {
    vp: Arc<Vnode>,
}

impl HoldRef {
    /// Becomes a user (FreeBSD's `vget` from a held vnode). `None` only if
    /// the vnode was doomed by a forced unmount.
    pub fn get(&self) -> Option<VnodeRef> {
        match self.vp.acquire(USE_ONE) {
            Acquired::Doomed => None,
            _ => Some(VnodeRef {
                vp: self.vp.clone(),
            }),
        }
    }

    /// The held vnode, for reading its identity and counts; use
    /// [`HoldRef::get`] to act on it as a user.
    pub fn vnode(&self) -> &Vnode {
        &self.vp
    }
}

impl Clone for HoldRef {
    fn clone(&self) -> Self {
        self.vp.refs.inc(HOLD_ONE);
        HoldRef {
            vp: self.vp.clone(),
        }
    }
}

impl Drop for HoldRef {
    fn drop(&mut self) {
        self.vp.release(HOLD_ONE);
    }
}

impl fmt::Debug for HoldRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.vp.fmt(f)
    }
}
