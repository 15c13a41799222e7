//! File handles of recycled nodes, by node id, so that a file handle the
//! kernel gave out for a file of the mount (`name_to_handle_at`, an NFS
//! export) still opens after the kernel dropped the inode and the vnode
//! layer recycled the node.
//!
//! # Why a table
//! Such a handle carries only the node id and its generation. When the
//! kernel has dropped the inode, it asks the server for `.` of that
//! id (`FileSystem::vget`), and a node id alone cannot be turned back
//! into a source file: this table keeps each recycled node's source
//! handle, which can. The kernel then checks the generation (a hash of
//! the source handle) itself, so a number reused by another file answers
//! ESTALE, as does a file removed from the source (the handle no longer
//! opens).
//!
//! # Bounds
//! At most [`CAPACITY`] entries, the least recently entered forgotten
//! first: a handle of a node recycled longer ago than that answers
//! ESTALE. Only files reached from the source's root are ever entered, so
//! a handle can lead back to no file the mount did not show.

use crate::handle::Handle;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use uvfs_vnode::Ino;

/// Most handles remembered: what bounds the table's memory, an entry
/// being a handle and two map slots.
pub(crate) const CAPACITY: usize = 1 << 18;

/// Node id -> source handle of recycled nodes, oldest first out.
pub(crate) struct Remembered {
    state: Mutex<State>,
    capacity: usize,
}

#[derive(Default)]
struct State {
    /// id -> (entry number, handle).
    handles: HashMap<Ino, (u64, Handle)>,
    /// (id, entry number) in the order entered; an id entered again has
    /// a newer number, so its older place in the queue evicts nothing.
    order: VecDeque<(Ino, u64)>,
    next: u64,
}

impl Remembered {
    pub(crate) fn new(capacity: usize) -> Remembered {
        Remembered {
            state: Mutex::new(State::default()),
            capacity,
        }
    }

    /// Remembers that node `id` was the file `handle` opens.
    pub(crate) fn remember(&self, id: Ino, handle: Handle) {
        let mut st = self.state.lock();
        let n = st.next;
        st.next += 1;
        st.handles.insert(id, (n, handle));
        st.order.push_back((id, n));
        while st.order.len() > self.capacity {
            let Some((old, m)) = st.order.pop_front() else {
                break;
            };
            if st.handles.get(&old).is_some_and(|(k, _)| *k == m) {
                st.handles.remove(&old);
            }
        }
    }

    /// The handle node `id` had, if it is remembered.
    pub(crate) fn get(&self, id: Ino) -> Option<Handle> {
        self.state.lock().handles.get(&id).map(|(_, h)| h.clone())
    }

    /// Every remembered (id, handle), oldest first (a live upgrade's
    /// state: entered again in this order, they are forgotten in it).
    pub(crate) fn entries(&self) -> Vec<(Ino, Handle)> {
        let st = self.state.lock();
        st.order
            .iter()
            .filter_map(|&(id, n)| match st.handles.get(&id) {
                Some((m, h)) if *m == n => Some((id, h.clone())),
                _ => None,
            })
            .collect()
    }

    /// Handles remembered now.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().handles.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(n: u8) -> Handle {
        Handle::for_test(1, &[n; 8])
    }

    #[test]
    fn the_oldest_go_first_and_a_renewed_id_stays() {
        let r = Remembered::new(3);
        r.remember(1, handle(1));
        r.remember(2, handle(2));
        r.remember(3, handle(3));
        r.remember(1, handle(9)); // renewed: now the newest
        r.remember(4, handle(4)); // evicts 2 (1's old place evicts nothing)
        assert_eq!(r.len(), 3);
        assert!(r.get(2).is_none());
        assert_eq!(r.get(1).unwrap().bytes(), &[9; 8]);
        assert!(r.get(3).is_some() && r.get(4).is_some());
        // Oldest by last entered: 3, then 1, then 4.
        r.remember(5, handle(5));
        assert!(r.get(3).is_none());
        assert_eq!(r.get(1).unwrap().bytes(), &[9; 8], "renewed after 3");
        r.remember(6, handle(6));
        assert!(r.get(1).is_none());
        assert!(r.get(4).is_some() && r.get(5).is_some() && r.get(6).is_some());
        assert_eq!(r.len(), 3);
    }
}
