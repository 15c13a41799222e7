//! The name cache's links on a vnode: which entries name it (`dst`) and,
//! for a directory, which entries live under it (`src`), so that purging a
//! recycled vnode or a removed directory costs the entries involved, never
//! a scan of the cache.
//!
//! Links are [`Handle`]s, the (shard, slot) address of an entry: one word,
//! no reference count, no copy of the name. A handle is only as good as the
//! moment it was read: whoever follows one locks the shard and checks that
//! the slot still holds an entry of the expected directory or target
//! (`NameCache::remove_handle`). Handles are kept exact under the locks
//! that change them: an entry's are added and removed under its shard's
//! lock together with the entry, and a shard's compaction rewrites the
//! handles of the entries it moves while it holds that lock.

use crate::hash::MixBuild;
use std::collections::HashSet;

/// Where an entry lives: shard index in the high half, slot in the low.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Handle(u64);

impl Handle {
    #[inline]
    pub(crate) fn new(shard: usize, slot: u32) -> Self {
        Handle((shard as u64) << 32 | u64::from(slot))
    }

    #[inline]
    pub(crate) fn shard(self) -> usize {
        (self.0 >> 32) as usize
    }

    #[inline]
    pub(crate) fn slot(self) -> u32 {
        self.0 as u32
    }
}

/// Entries naming a vnode: almost always one (more only with hard links),
/// so the first is kept inline and a vnode with one name allocates nothing.
/// The rare many are a boxed vector: a thin pointer keeps `Dst` at 16
/// bytes (a bare `Vec` or boxed slice would make every vnode pay 8 more).
#[derive(Default)]
pub(crate) enum Dst {
    #[default]
    None,
    One(Handle),
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Handle>>),
}

impl Dst {
    fn push(&mut self, h: Handle) {
        *self = match std::mem::take(self) {
            Dst::None => Dst::One(h),
            Dst::One(a) => Dst::Many(Box::new(vec![a, h])),
            Dst::Many(mut v) => {
                v.push(h);
                Dst::Many(v)
            }
        };
    }

    fn remove(&mut self, h: Handle) {
        match self {
            Dst::None => {}
            Dst::One(a) => {
                if *a == h {
                    *self = Dst::None;
                }
            }
            Dst::Many(v) => {
                if let Some(i) = v.iter().position(|x| *x == h) {
                    v.swap_remove(i);
                }
                if v.len() == 1 {
                    *self = Dst::One(v[0]);
                }
            }
        }
    }

    fn into_vec(self) -> Vec<Handle> {
        match self {
            Dst::None => Vec::new(),
            Dst::One(a) => vec![a],
            Dst::Many(v) => *v,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        match self {
            Dst::None => 0,
            Dst::One(_) => 1,
            Dst::Many(v) => v.len(),
        }
    }
}

/// The cache's links kept on a vnode (under `Vnode::nc`).
#[derive(Default)]
pub(crate) struct NcLinks {
    dst: Dst,
    /// A set, because a directory can have many entries and each removal
    /// must not scan them all. Boxed: only directories with entries pay
    /// for one, every other vnode carries 8 bytes.
    #[allow(clippy::box_collection)]
    src: Option<Box<HashSet<Handle, MixBuild>>>,
}

impl NcLinks {
    pub(crate) fn src_len(&self) -> usize {
        self.src.as_ref().map_or(0, |s| s.len())
    }

    pub(crate) fn add_src(&mut self, h: Handle) {
        self.src.get_or_insert_with(Default::default).insert(h);
    }

    /// Whether `h` was there.
    pub(crate) fn remove_src(&mut self, h: Handle) -> bool {
        let Some(s) = self.src.as_mut() else {
            return false;
        };
        let removed = s.remove(&h);
        if s.is_empty() {
            self.src = None;
        }
        removed
    }

    /// A copy of the handles of the entries under this directory.
    pub(crate) fn src_handles(&self) -> Vec<Handle> {
        self.src
            .as_ref()
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    pub(crate) fn add_dst(&mut self, h: Handle) {
        self.dst.push(h);
    }

    pub(crate) fn remove_dst(&mut self, h: Handle) {
        self.dst.remove(h);
    }

    /// Takes the handles of the entries naming this vnode.
    pub(crate) fn take_dst(&mut self) -> Vec<Handle> {
        std::mem::take(&mut self.dst).into_vec()
    }

    #[cfg(test)]
    pub(crate) fn dst_len(&self) -> usize {
        self.dst.len()
    }

    /// Whether `h` is among the entries naming this vnode (tests).
    #[cfg(test)]
    pub(crate) fn has_dst(&self, h: Handle) -> bool {
        match &self.dst {
            Dst::None => false,
            Dst::One(a) => *a == h,
            Dst::Many(v) => v.contains(&h),
        }
    }

    /// A compaction moved an entry under this directory from `from` to `to`.
    pub(crate) fn move_src(&mut self, from: Handle, to: Handle) {
        let was = self.remove_src(from);
        debug_assert!(was, "a live entry's handle is in its directory's set");
        self.add_src(to);
    }

    /// A compaction moved an entry naming this vnode from `from` to `to`.
    /// Added even if `from` was not there: `purge_vnode` may have taken the
    /// list and be working through it, and must find the entry again.
    pub(crate) fn move_dst(&mut self, from: Handle, to: Handle) {
        self.dst.remove(from);
        self.dst.push(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dst_keeps_one_inline_and_many_in_a_vector() {
        let (a, b, c) = (Handle::new(1, 2), Handle::new(3, 4), Handle::new(0, 0));
        let mut l = NcLinks::default();
        l.add_dst(a);
        assert!(matches!(l.dst, Dst::One(x) if x == a));
        l.add_dst(b);
        l.add_dst(c);
        assert_eq!(l.dst_len(), 3);
        l.remove_dst(b);
        l.remove_dst(c);
        assert!(matches!(l.dst, Dst::One(x) if x == a), "back to inline");
        l.remove_dst(Handle::new(9, 9));
        assert_eq!(l.dst_len(), 1, "removing an absent handle changes nothing");
        assert_eq!(l.take_dst(), vec![a]);
        assert_eq!(l.dst_len(), 0);
    }

    #[test]
    fn src_set_goes_away_when_empty() {
        let mut l = NcLinks::default();
        l.add_src(Handle::new(0, 1));
        l.move_src(Handle::new(0, 1), Handle::new(0, 7));
        assert_eq!(l.src_handles(), vec![Handle::new(0, 7)]);
        assert!(l.remove_src(Handle::new(0, 7)));
        assert!(l.src.is_none());
        assert!(!l.remove_src(Handle::new(0, 7)));
    }

    #[test]
    fn handle_round_trips_shard_and_slot() {
        let h = Handle::new(2047, u32::MAX - 1);
        assert_eq!((h.shard(), h.slot()), (2047, u32::MAX - 1));
    }

    #[test]
    fn links_keep_a_vnode_small() {
        assert_eq!(std::mem::size_of::<NcLinks>(), 24);
    }
}
