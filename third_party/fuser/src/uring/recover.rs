//! Taking over the entries of a server that died (crash recovery).
//!
//! A live upgrade's predecessor fills and seals its entries before its
//! rings close (`handover.rs`); a server killed outright does neither. Its
//! entries' memfds outlive it where a supervisor keeps them (each queue
//! gives every entry it registers to the session's [`RingKeeper`] first),
//! and a server started after the crash maps them at the same addresses,
//! as a successor does. What each one holds is read from the state word
//! its server kept beside the kernel's header (`entry::State`) and from
//! the header itself:
//!
//! - a request not yet answered: served again from the buffers, marked as
//!   resent (`FUSE_UNIQUE_RESEND`), as the kernel marks /dev/fuse's: the
//!   dead server may have done the change before it could answer;
//! - a whole reply: committed as it is (if the dead server's commit had
//!   reached the kernel, this one fails with `ENOENT`, harmless: ids are
//!   never reused, so an old reply's id names no request now);
//! - half a reply: answered `EIO` (the request was served; its answer is
//!   lost);
//! - nothing (never given a request): the entry was armed in the dead
//!   ring, and the kernel cancelled it with the ring: it is let go. So is
//!   an entry whose reply the kernel had taken (its commit above fails).
//!   A request the kernel had just given an armed entry, whose copy was
//!   to run in the dead thread
//!   (`fuse_uring_send_in_task` with the task gone), never reaches any
//!   buffer: Linux 6.18 ends it with `ECANCELED`, which its caller gets.
//!   User space cannot reach it (only its id names it, and no buffer holds
//!   that), so those calls, at most one per entry a queue keeps armed,
//!   fail; /dev/fuse (`--transport dev`) loses none.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use log::info;

use super::Queue;
use super::entry::{COMMIT_ID, Entry, State, UNIQUE_RESEND};

/// Where the entries' memfds are kept beyond this process (a supervisor),
/// so that a server started after this one dies can take them over.
pub trait RingKeeper: Send + Sync {
    /// Keeps entry buffers `memfd` of queue `qid`, mapped at `addr`.
    /// Called before the entry is given to the kernel.
    fn keep(&self, qid: u16, addr: u64, memfd: BorrowedFd<'_>);
    /// The entry at `addr` is done with (the kernel let it go).
    fn forget(&self, qid: u16, addr: u64);
}

/// What a dead server's entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    Unanswered,
    Reply,
    Torn,
    Nothing,
}

/// Reads what `e` holds from its state and header.
pub(super) fn held(e: &Entry) -> Held {
    let cid = e.read_u64(COMMIT_ID);
    // The kernel's copy of a request: an in header (a positive opcode
    // where a reply's error, never positive, would be) naming the id the
    // entry was given. A request copied in after the server last set the
    // state (it died before reading the completion) looks like this too,
    // and so does one a server started after an earlier crash marked as
    // resent and died serving.
    let request =
        cid != 0 && (e.read_u32(4) as i32) > 0 && (e.read_u64(8) & !UNIQUE_RESEND) == cid;
    match e.state() {
        State::Replying => Held::Torn,
        _ if request => Held::Unanswered,
        State::Request => Held::Torn,
        State::Replied => Held::Reply,
        State::New => Held::Nothing,
    }
}

/// Takes over queue `q`'s entries of a dead server (`recovered`): entries
/// holding requests to serve are pushed to `held_out`, replies are
/// committed, the rest let go.
pub(super) fn take(
    q: &mut Queue,
    recovered: Vec<Arc<Entry>>,
    held_out: &mut Vec<usize>,
) -> io::Result<()> {
    let (mut served, mut replied, mut torn, mut dead) = (0, 0, 0, 0);
    for e in recovered {
        let cid = e.read_u64(COMMIT_ID);
        match held(&e) {
            Held::Nothing => {
                if let Some(k) = &q.keeper {
                    k.forget(q.qid, e.addr());
                }
                dead += 1;
            }
            Held::Unanswered => {
                e.write_header(8, &(cid | UNIQUE_RESEND).to_ne_bytes());
                e.set_state(State::Request);
                held_out.push(q.adopt(e));
                served += 1;
            }
            Held::Reply => {
                let idx = q.adopt(e);
                q.commit(idx)?;
                replied += 1;
            }
            Held::Torn => {
                e.write_error(libc::EIO, cid);
                let idx = q.adopt(e);
                q.commit(idx)?;
                torn += 1;
            }
        }
    }
    info!(
        "fuse uring queue {}: took over a dead server's entries: {served} requests served \
         again, {replied} replies and {torn} half-written ones (answered EIO) committed, \
         {dead} armed ones let go",
        q.qid
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;

    /// An entry as the kernel leaves it after copying request `unique`
    /// (opcode 3, GETATTR) in.
    fn with_request(unique: u64) -> Entry {
        let e = Entry::new(4096).unwrap();
        e.write_header(0, &40u32.to_ne_bytes());
        e.write_header(4, &3u32.to_ne_bytes());
        e.write_header(8, &unique.to_ne_bytes());
        e.write_header(COMMIT_ID, &unique.to_ne_bytes());
        e
    }

    fn reply(e: &Entry, unique: u64) {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&16u32.to_ne_bytes());
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        e.write_reply(&[IoSlice::new(&h)]).unwrap();
    }

    #[test]
    fn what_an_entry_holds_is_read_from_its_state_and_header() {
        // Never given a request.
        let e = Entry::new(4096).unwrap();
        assert_eq!(held(&e), Held::Nothing);
        // A request copied in and seen, or copied in over a committed
        // reply (its server died before reading the completion).
        let e = with_request(42);
        assert_eq!(held(&e), Held::Unanswered);
        e.set_state(State::Request);
        assert_eq!(held(&e), Held::Unanswered);
        e.set_state(State::Replied);
        assert_eq!(held(&e), Held::Unanswered);
        // Marked resent by a server that took it over, then died too.
        e.write_header(8, &(42 | UNIQUE_RESEND).to_ne_bytes());
        e.set_state(State::Request);
        assert_eq!(held(&e), Held::Unanswered);
        // A whole reply (a resend mark in the id is not passed on).
        let e = with_request(44 | UNIQUE_RESEND);
        e.set_state(State::Request);
        reply(&e, 44 | UNIQUE_RESEND);
        assert_eq!(e.read_u64(8), 44);
        assert_eq!(held(&e), Held::Reply);
        // Dead mid-copy of a reply.
        let e = with_request(46);
        e.set_state(State::Replying);
        assert_eq!(held(&e), Held::Torn);
        // Marked as holding a request, but the header is a reply's.
        let e = with_request(48);
        reply(&e, 48);
        e.set_state(State::Request);
        assert_eq!(held(&e), Held::Torn);
    }
}
