//! Process-wide policy of the `uvfs` binary, kept out of the library
//! crates so that a file system built on `uvfs-fuse` picks its own:
//!
//! - `alloc.rs`: the global allocator (mimalloc, counting live bytes only
//!   while a measurement asks) and giving freed memory back to the system;
//! - `hugepages.rs`: transparent huge pages off for the heap, and what
//!   children inherit.
//!
//! The benchmarks use both (heap bytes per vnode; peers started with the
//! huge-page setting the process itself was given).

pub mod alloc;
pub mod hugepages;
