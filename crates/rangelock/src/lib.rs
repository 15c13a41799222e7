//! Byte-range reader/writer locks for uvfs files.
//!
//! A [`RangeLock`] makes `read`, `write` and `truncate` on one file atomic
//! with respect to each other while requests on disjoint ranges proceed in
//! parallel. Ranges are half-open ([`ByteRange`]); `[a,b)` and `[b,c)` never
//! conflict; `start..` means "to infinity" (truncate, append, writes with no
//! known offset). Reads take shared ranges, writes and truncates exclusive
//! ones. Every acquisition has a blocking form, a `try_` form, a deadline
//! form (`*_until`) and a cancellable form (`*_cancellable` with a
//! [`CancelToken`]); an abandoned wait leaves no trace in the lock.
//!
//! ```
//! use uvfs_rangelock::RangeLock;
//!
//! let lock = RangeLock::new();
//! let reading = lock.read(0..4096);
//! // Readers share; a writer waits only for ranges it overlaps.
//! let also_reading = lock.read(0..100);
//! assert!(lock.try_write(4096..8192).is_some());
//! assert!(lock.try_write(4000..5000).is_none());
//! drop(reading);
//! drop(also_reading);
//! // A truncate takes the file from its new end to infinity.
//! let _truncating = lock.write(4000..);
//! ```
//!
//! # Design
//!
//! Three mechanisms share the work (see `bias.rs`, `slot.rs` and
//! `queue.rs`):
//!
//! * **Biased readers (fastest path).** While no writer has come lately
//!   near its pages, a reader of at most 32 pages publishes its range in its
//!   own thread's record (`record.rs`) with plain stores, then re-checks the
//!   bias of its *zone* (the reader slot it would use): no atomic
//!   read-modify-write, no store-load fence, no shared line written. A
//!   granted writer *revokes* the bias of the zones its range can meet and
//!   no others (one store each and one `membarrier(2)` IPI round, the
//!   asymmetric fence written out in `bias.rs`), then waits for the biased
//!   readers of overlapping ranges it finds in the records; readers of other
//!   pages stay biased and never load a line it writes. Re-bias is inhibited for 9x the revocation's cost
//!   (BRAVO), so write-heavy files stay on the slot path instead of paying a
//!   `membarrier` per write. Without `membarrier` (non-Linux, old kernels,
//!   or `UVFS_RANGELOCK_NO_BIAS=1`) locks are never biased.
//! * **Reader slots (fast path while bias is off).** A reader whose range lies within one page
//!   announces itself in a cache-padded slot chosen by that page (readers of
//!   2..=32 pages in one of a few "wide" slots). A slot holds readers of one
//!   exact range with a count, so taking and dropping a repeated read range
//!   is one CAS and one `fetch_sub` on a line that readers of other pages
//!   never touch. Nothing shared by all users of the file is written; this
//!   is what the FreeBSD lock of 2023 (one queue under the interlock) lacked.
//! * **The queue (slow path).** One mutex over a list of granted ranges and a
//!   FIFO of waiters. Every writer goes here, and so does any reader that
//!   cannot use a slot. A granted writer then *marks* every slot where an
//!   overlapping fast reader could be (new readers there divert to the
//!   queue) and waits for the overlapping readers already inside to leave.
//!   Both sides act on the slot's single state word, so there is no
//!   store-load fence on the fast path.
//!
//! Waiters sleep on their own parker and are handed the lock by whoever
//! releases what blocked them: only requests that became grantable are
//! woken, never the whole queue.
//!
//! # Fairness
//!
//! First come, first served among conflicting requests; see
//! [`RangeLock`#fairness](RangeLock#fairness).
//!
//! # Memory
//!
//! `size_of::<RangeLock>()` is 256 bytes on x86-64 (the slot-table pointer
//! and the lock id on one 128-byte line, the queue's mutex on another:
//! readers load the one, writers write the other) and `new` is `const` and
//! allocation-free; the slot table (20 slots of 128 bytes, 2.5 KiB) is
//! allocated on the first read. Biased readers use per-thread records (4
//! entries, 256 bytes per thread, shared by every lock and reused after the
//! thread exits), not per-lock memory. So a vnode should hold it as
//! `OnceLock<Box<RangeLock>>` (16 bytes when idle), created on the first
//! read, write or truncate.
//!
//! # Map
//!
//! Each module uses only those below it.
//!
//! | file | holds |
//! |---|---|
//! | `lock.rs` | [`RangeLock`]: the acquisition paths (biased, slot, queue) and a writer's revoke and drain |
//! | `snapshot.rs` | [`Snapshot`], [`Holder`]: the diagnostic view |
//! | `guard.rs` | [`ReadGuard`], [`WriteGuard`]: how each holds its range, released on drop |
//! | `state.rs` | a lock's fields and the release paths its guards call |
//! | `queue.rs` | the slow path's granted list and FIFO of waiters ([`Mode`]) |
//! | `slot.rs` | the reader slots and their zones' bias words |
//! | `record.rs` | per-thread records of biased readers |
//! | `bias.rs` | the biased path's protocol, `membarrier`, the inhibit times |
//! | `parker.rs` | sleeping and waking waiters; [`CancelToken`] |
//! | `range.rs` | [`ByteRange`] |
//! | `sync.rs` | std or loom primitives |
//!
//! # Not this scheme
//!
//! The lock-free sorted list of Kogan, Dice and Issa (EuroSys 2020) is
//! patented; this crate does not use a lock-free list at all.

#![warn(missing_docs)]

mod bias;
mod guard;
mod lock;
mod parker;
mod queue;
mod range;
mod record;
mod slot;
mod snapshot;
mod state;
mod sync;

pub use guard::{ReadGuard, WriteGuard};
pub use lock::RangeLock;
pub use parker::CancelToken;
pub use queue::Mode;
pub use range::{ByteRange, PAGE_SHIFT};
pub use snapshot::{Holder, Snapshot};
