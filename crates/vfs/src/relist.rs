//! Directories listed with attributes a moment ago, whose next
//! READDIRPLUS may list names alone (a file system's `readdirplus`
//! passes such an entry to its sink without a vnode).
//!
//! The kernel asks READDIRPLUS whenever a listing starts at offset 0 and
//! its cached listing is incomplete or stale, and links every entry the
//! reply carries attributes for: one lookup count each (a FORGET later),
//! its attributes refreshed. `rm -r` lists each directory twice in a row
//! (coreutils reads one buffer to see whether it is empty, closes it, and
//! reads it again to remove its entries), and the first read never
//! reaches the end, so the kernel's listing cache cannot serve the
//! second: the server looked every entry up twice, a `statx` and a node
//! each, for attributes the kernel had just been given (a quarter of the
//! server's time in a passthrough `rm -rf`). The passthrough uses this;
//! memfs, whose lookups are in memory, gained nothing from it and does
//! not.
//!
//! An entry with node id 0 is listed and not linked (`fuse_direntplus_link`
//! takes it for "no attributes given"). That is never wrong: the kernel
//! still decides for itself whether what it holds is valid, and asks
//! (LOOKUP, GETATTR) where it is not. What it can cost is a round trip
//! the attributes would have saved, so names alone are given only for
//! entries among the first ones a listing of the same directory from its
//! start gave with attributes less than [`Relist::WINDOW`] ago (shorter
//! than the attribute timeouts uvfs gives by default), and whose node the
//! kernel still holds. (Positions, not cookies, say which entries those were: cookies
//! need not grow along a listing on every file system.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uvfs_vnode::{Ino, Mount, VnodeLayer};

/// Listings remembered at once: a walker lists one directory at a time
/// (`rm -r` twice each), so a few cover several walkers.
const SLOTS: usize = 8;

#[derive(Clone, Copy)]
struct Listing {
    dir: Ino,
    at: Instant,
    /// Entries the listing gave from the start (`.` and `..` included),
    /// all with attributes.
    given: usize,
}

/// The last few directories listed with attributes from their start.
#[derive(Default)]
pub struct Relist {
    slots: Mutex<([Option<Listing>; SLOTS], usize)>,
}

impl Relist {
    /// How long a listing's attributes are taken to be what the kernel
    /// holds: less than the attribute timeouts uvfs gives by default (a
    /// second or more), and a change the kernel learns of (its own writes,
    /// a server's invalidations) makes it ask anyway.
    pub const WINDOW: Duration = Duration::from_millis(500);

    /// A READDIRPLUS of `dir` from its start gave its first `given`
    /// entries, all with attributes.
    pub fn given(&self, dir: Ino, given: usize) {
        let l = Listing {
            dir,
            at: Instant::now(),
            given,
        };
        let mut g = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let (slots, next) = &mut *g;
        if let Some(s) = slots.iter_mut().find(|s| s.is_some_and(|s| s.dir == dir)) {
            *s = Some(l);
            return;
        }
        slots[*next] = Some(l);
        *next = (*next + 1) % SLOTS;
    }

    /// How many of `dir`'s first entries a listing from its start gave
    /// with attributes less than [`Relist::WINDOW`] ago, if one did.
    pub fn fresh(&self, dir: Ino) -> Option<usize> {
        let g = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let l = g.0.iter().flatten().find(|l| l.dir == dir)?;
        (l.at.elapsed() < Self::WINDOW).then_some(l.given)
    }

    /// Whether the kernel holds node `ino` of `mnt` (a lookup count of
    /// its), as a name given alone requires.
    pub fn kernel_holds(layer: &VnodeLayer, mnt: &Arc<Mount>, ino: Ino) -> bool {
        layer
            .lookup_cached(mnt, ino)
            .is_some_and(|vp| vp.ext_count() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_fresh_for_the_window_and_the_latest_counts() {
        let r = Relist::default();
        assert_eq!(r.fresh(7), None, "never listed");
        r.given(7, 40);
        assert_eq!(r.fresh(7), Some(40));
        r.given(7, 12);
        assert_eq!(r.fresh(7), Some(12), "the latest listing counts");
        {
            let mut g = r.slots.lock().unwrap();
            for l in g.0.iter_mut().flatten() {
                l.at =
                    l.at.checked_sub(Relist::WINDOW)
                        .expect("uptime past the window");
            }
        }
        assert_eq!(r.fresh(7), None, "aged past the window");
    }

    #[test]
    fn the_oldest_listing_makes_room_for_a_new_directory() {
        let r = Relist::default();
        for d in 0..(SLOTS as Ino + 3) {
            r.given(d, 10 + d as usize);
        }
        assert_eq!(r.fresh(0), None, "overwritten by later listings");
        assert_eq!(r.fresh(2), None);
        assert_eq!(r.fresh(3), Some(13));
        assert_eq!(r.fresh(SLOTS as Ino + 2), Some(10 + SLOTS + 2));
    }
}
