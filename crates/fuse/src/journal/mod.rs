//! The crash journal: what the kernel knows of this server's nodes and
//! open files, kept current in shared memory (a memfd the supervisor
//! holds, `supervise/`), so that a server started after this one dies
//! for any reason (a bug, the OOM killer, `kill -9`) goes on serving the
//! same node ids and handles.
//!
//! # What it holds
//! - Per node the kernel holds: its inode number, the kernel's lookup
//!   count, and the file system's record of it
//!   (`FileSystem::journal_record`, a passthrough's source handle).
//! - Per open file or directory: its handle, inode number, the file
//!   system's handle, its open flags, and its node's I/O mode (backing id).
//!
//! # Why it can be trusted after a crash
//! Counts follow the rule of the node table (`nodes.rs`): raised before
//! the reply that hands the kernel a reference, lowered after the kernel
//! gave it back, so the journal's count is never below the kernel's (a
//! crash in between leaves one too many: the node lives until unmount,
//! never too short). An open is journaled before its reply and removed
//! after its RELEASE: an open the kernel never heard of is reopened for
//! nothing, never one it holds missing. Each update is made under one
//! lock and lands in the memfd in an order that a crash cannot tear
//! (`table.rs`).

pub(crate) mod table;

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use table::{Slot, Table};
use uvfs_vfs::{Fh, Ino, JournalRecord, VnodeRef, JOURNAL_RECORD};

/// A node's slot (key: inode number, value: lookup count).
pub(crate) const NODE: u8 = 1;
/// An open file's slot (key: the kernel's handle).
pub(crate) const HANDLE: u8 = 2;

/// Finds a node's record (`FileSystem::journal_record`).
pub type Recorder = Box<dyn Fn(Ino, Option<&VnodeRef>) -> Option<JournalRecord> + Send + Sync>;

/// Passes each new table to whoever must have it before it is written
/// (the supervisor).
pub type Publish = Box<dyn Fn(BorrowedFd<'_>) -> std::io::Result<()> + Send + Sync>;

/// An open file as journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenRec {
    pub ino: Ino,
    pub fs_fh: u64,
    pub flags: i32,
    pub writable: bool,
    pub kernel_writer: bool,
    pub dir: bool,
    /// Counted in its node's I/O mode (`backing.rs`): with the backing
    /// id if the kernel does its I/O.
    pub backing: Option<Option<u32>>,
}

impl OpenRec {
    fn encode(&self) -> (u64, JournalRecord) {
        let mut v = u64::from(self.flags as u32);
        v |= u64::from(self.writable) << 32;
        v |= u64::from(self.kernel_writer) << 33;
        v |= u64::from(self.dir) << 34;
        v |= u64::from(self.backing.is_some()) << 35;
        v |= u64::from(matches!(self.backing, Some(Some(_)))) << 36;
        let mut rec = [0u8; JOURNAL_RECORD];
        rec[0..8].copy_from_slice(&self.ino.to_le_bytes());
        rec[8..16].copy_from_slice(&self.fs_fh.to_le_bytes());
        if let Some(Some(id)) = self.backing {
            rec[16..20].copy_from_slice(&id.to_le_bytes());
        }
        (v, rec)
    }

    pub(crate) fn decode(v: u64, rec: &JournalRecord) -> OpenRec {
        let bit = |n: u32| v >> n & 1 == 1;
        let id = u32::from_le_bytes(rec[16..20].try_into().expect("4 bytes"));
        OpenRec {
            ino: u64::from_le_bytes(rec[0..8].try_into().expect("8 bytes")),
            fs_fh: u64::from_le_bytes(rec[8..16].try_into().expect("8 bytes")),
            flags: v as u32 as i32,
            writable: bit(32),
            kernel_writer: bit(33),
            dir: bit(34),
            backing: bit(35).then_some(bit(36).then_some(id)),
        }
    }

    /// The file system's handle.
    pub(crate) fn fh(&self) -> Fh {
        Fh(self.fs_fh)
    }
}

/// Counters of the journal.
#[derive(Default, Debug)]
pub struct JournalCounters {
    /// Tables made larger (each handed to the supervisor).
    pub grown: AtomicU64,
    /// Nodes journaled without a record (lost by a crash).
    pub unrecorded: AtomicU64,
    /// Tables the supervisor could not be given: journaling stopped.
    pub failed: AtomicU64,
}

/// Nodes the kernel forgot whose records are kept, the oldest dropped
/// first: a file handle of the mount (`name_to_handle_at`) names a node
/// the kernel may have forgotten long ago, and a server started after a
/// crash finds it only by its record (as the passthrough's table of
/// recycled nodes' handles does while a server lives).
const FORGOTTEN_KEPT: usize = 1 << 18;

/// The journal of one server.
pub struct Journal {
    table: Mutex<Option<Table>>,
    /// Nodes whose count fell to zero, oldest first (may repeat).
    forgotten: Mutex<VecDeque<Ino>>,
    publish: Publish,
    record: OnceLock<Recorder>,
    /// Counters.
    pub counters: JournalCounters,
}

impl Journal {
    /// An empty journal whose tables go to `publish` (the first one now).
    pub fn new(publish: Publish) -> std::io::Result<Journal> {
        let t = Table::new(0)?;
        publish(t.fd())?;
        Ok(Journal {
            table: Mutex::new(Some(t)),
            forgotten: Mutex::new(VecDeque::new()),
            publish,
            record: OnceLock::new(),
            counters: JournalCounters::default(),
        })
    }

    /// Goes on writing a crashed predecessor's journal (`r`, whose table
    /// the supervisor holds): it says what this server was handed, so
    /// nothing is written again. Nodes it holds as forgotten are kept as
    /// long as newer ones.
    pub(crate) fn resume(publish: Publish, r: Resumable) -> std::io::Result<Journal> {
        publish(r.table.fd())?;
        Ok(Journal {
            table: Mutex::new(Some(r.table)),
            forgotten: Mutex::new(r.forgotten),
            publish,
            record: OnceLock::new(),
            counters: JournalCounters::default(),
        })
    }

    /// A duplicate of the table's memfd, for a live upgrade's successor
    /// (which goes on writing it once this server has stopped); None if
    /// journaling stopped.
    pub(crate) fn dup_table(&self) -> std::io::Result<Option<OwnedFd>> {
        let g = self.table.lock();
        g.as_ref().map(|t| t.fd().try_clone_to_owned()).transpose()
    }

    /// Sets how node records are made (once).
    pub fn set_recorder(&self, r: Recorder) {
        let _ = self.record.set(r);
    }

    /// Runs `f` on the table, grown first if it has no room for one more
    /// slot. A table the supervisor could not be given stops the journal
    /// (a crash then ends the mount, as without one), said once.
    fn with_room(&self, f: impl FnOnce(&mut Table)) {
        let mut g = self.table.lock();
        let Some(t) = g.as_mut() else { return };
        if !t.has_room() {
            match t.grown(1).and_then(|n| (self.publish)(n.fd()).map(|()| n)) {
                Ok(n) => {
                    *t = n;
                    self.counters.grown.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    log::error!(
                        "crash journal stopped (the supervisor could not be given a larger \
                         table: {e}): a crash of this server will end the mount"
                    );
                    self.counters.failed.fetch_add(1, Ordering::Relaxed);
                    *g = None;
                    return;
                }
            }
        }
        f(t);
    }

    fn record(&self, ino: Ino, vp: Option<&VnodeRef>) -> JournalRecord {
        match self.record.get().and_then(|r| r(ino, vp)) {
            Some(r) => r,
            None => {
                self.counters.unrecorded.fetch_add(1, Ordering::Relaxed);
                [0; JOURNAL_RECORD]
            }
        }
    }

    /// The kernel got `n` more references to inode `ino` (`vp`), before
    /// the reply that gives them. `likely_new`: the caller saw no kernel
    /// reference to the node, so its slot is probably absent (or a
    /// forgotten node's): the record is made first and the slot probed
    /// once, not looked up first. A wrong guess either way costs time,
    /// never a count: both ways add to whatever the slot holds.
    pub(crate) fn remembered(&self, ino: Ino, n: u64, vp: Option<&VnodeRef>, likely_new: bool) {
        if !likely_new {
            let mut g = self.table.lock();
            let Some(t) = g.as_mut() else { return };
            // A node the kernel holds keeps its record; one it forgot may
            // be another file now (its inode number reused): recorded anew.
            if let Some(v @ 1..) = t.get(NODE, ino) {
                t.set_value(NODE, ino, v.saturating_add(n));
                return;
            }
        }
        // New: its record is made outside the lock (it may take the file
        // system's locks); a concurrent first reference of the same node
        // is folded in by `add`, which adds to what the slot holds.
        let rec = self.record(ino, vp);
        self.with_room(|t| t.add(NODE, ino, n, &rec));
    }

    /// The kernel gave `n` references to inode `ino` back. A node it no
    /// longer holds keeps its record, with count 0, among the last
    /// [`FORGOTTEN_KEPT`] such.
    pub(crate) fn forgot(&self, ino: Ino, n: u64) {
        let mut g = self.table.lock();
        let Some(t) = g.as_mut() else { return };
        let Some(v) = t.get(NODE, ino) else { return };
        t.set_value(NODE, ino, v.saturating_sub(n));
        if v > n || v == 0 {
            return;
        }
        let mut f = self.forgotten.lock();
        f.push_back(ino);
        if f.len() > FORGOTTEN_KEPT {
            let old = f.pop_front().expect("not empty");
            if t.get(NODE, old) == Some(0) {
                t.remove(NODE, old);
            }
        }
    }

    /// Inode `ino` has `count` kernel references (all of them, taken
    /// over from a predecessor).
    pub(crate) fn set_count(&self, ino: Ino, count: u64, vp: Option<&VnodeRef>) {
        if count == 0 {
            return;
        }
        let rec = self.record(ino, vp);
        self.with_room(|t| {
            t.put(&Slot {
                tag: NODE,
                key: ino,
                value: count,
                rec,
            })
        });
    }

    /// Handle `fh` was opened (before its reply).
    pub(crate) fn opened(&self, fh: u64, o: &OpenRec) {
        let (value, rec) = o.encode();
        self.with_room(|t| {
            t.put(&Slot {
                tag: HANDLE,
                key: fh,
                value,
                rec,
            })
        });
    }

    /// Handle `fh` was released.
    pub(crate) fn closed(&self, fh: u64) {
        if let Some(t) = self.table.lock().as_mut() {
            t.remove(HANDLE, fh);
        }
    }

    /// Live entries and bytes of the table (for `uvfs stat`).
    pub fn size(&self) -> (usize, usize) {
        self.table
            .lock()
            .as_ref()
            .map_or((0, 0), |t| (t.live(), t.bytes()))
    }
}

/// The journal's counters for `uvfs stat` (`server.journal.*`), zeros
/// for a server without a supervisor.
pub(crate) fn report(j: Option<&Journal>, out: &mut crate::report::Report) {
    let (entries, bytes) = j.map_or((0, 0), Journal::size);
    let c = |f: fn(&JournalCounters) -> &AtomicU64| {
        j.map_or(0, |j| f(&j.counters).load(Ordering::Relaxed))
    };
    out.put(
        "server.supervised",
        u64::from(j.is_some()),
        "1: a supervisor starts a new server if this one dies (crash recovery)",
    );
    out.put(
        "server.journal.entries",
        entries as u64,
        "Nodes and open files in the crash journal",
    );
    out.put(
        "server.journal.bytes",
        bytes as u64,
        "Bytes of the crash journal's table (shared memory)",
    );
    out.put(
        "server.journal.grown",
        c(|c| &c.grown),
        "Times the crash journal's table was made larger",
    );
    out.put(
        "server.journal.unrecorded",
        c(|c| &c.unrecorded),
        "Nodes journaled without a way to find them again (lost by a crash: ESTALE)",
    );
}

/// A crashed server's journal, read back.
#[derive(Debug, Default)]
pub(crate) struct Contents {
    /// Inode number, count (0: forgotten by the kernel, kept for its
    /// file handles), record.
    pub nodes: Vec<(Ino, u64, JournalRecord)>,
    /// Handle and its open.
    pub opens: Vec<(u64, OpenRec)>,
}

/// A crashed server's journal table, mapped, with the nodes it holds as
/// forgotten: what [`Journal::resume`] goes on writing.
pub(crate) struct Resumable {
    table: Table,
    forgotten: VecDeque<Ino>,
}

/// Reads the journal in memfd `fd` (a crashed server's, which the
/// supervisor passed on), keeping it mapped to be resumed.
pub(crate) fn read(fd: OwnedFd) -> std::io::Result<(Contents, Resumable)> {
    // Room for every slot the table can hold: growing a vector of a
    // million entries copies it about twice over.
    let most = Table::max_live(table::check(&fd)?.0);
    let mut c = Contents {
        nodes: Vec::with_capacity(most),
        opens: Vec::new(),
    };
    let mut forgotten = VecDeque::new();
    let table = Table::open(fd, |s| match s.tag {
        NODE => {
            if s.value == 0 {
                forgotten.push_back(s.key);
            }
            c.nodes.push((s.key, s.value, s.rec));
        }
        HANDLE => c.opens.push((s.key, OpenRec::decode(s.value, &s.rec))),
        _ => {}
    })?;
    c.nodes.sort_unstable_by_key(|n| n.0);
    Ok((c, Resumable { table, forgotten }))
}

/// The journal in memfd `fd` of a server handing its mount over alive
/// (stopped: it writes no more), to be resumed by its successor.
pub(crate) fn resumable(fd: OwnedFd) -> std::io::Result<Resumable> {
    let mut forgotten = VecDeque::new();
    let table = Table::open(fd, |s| {
        if s.tag == NODE && s.value == 0 {
            forgotten.push_back(s.key);
        }
    })?;
    Ok(Resumable { table, forgotten })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;
    use std::sync::Arc;

    fn journal() -> (Journal, Arc<Mutex<Option<OwnedFd>>>) {
        let last: Arc<Mutex<Option<OwnedFd>>> = Default::default();
        let l = last.clone();
        let j = Journal::new(Box::new(move |fd| {
            *l.lock() = Some(fd.try_clone_to_owned()?);
            Ok(())
        }))
        .unwrap();
        (j, last)
    }

    #[test]
    fn counts_and_opens_survive_as_the_supervisor_holds_them() {
        let (j, last) = journal();
        j.set_recorder(Box::new(|ino, _| {
            let mut r = [0; JOURNAL_RECORD];
            r[0] = ino as u8;
            (ino % 2 == 0).then_some(r)
        }));
        for ino in 2..20_000u64 {
            j.remembered(ino, 2, None, ino % 2 == 0);
        }
        for ino in 2..10_000u64 {
            j.forgot(ino, if ino % 3 == 0 { 2 } else { 1 });
        }
        let o = OpenRec {
            ino: 42,
            fs_fh: 7,
            flags: libc::O_RDWR | libc::O_APPEND,
            writable: true,
            kernel_writer: true,
            dir: false,
            backing: Some(Some(3)),
        };
        j.opened(5, &o);
        j.opened(
            6,
            &OpenRec {
                backing: None,
                dir: true,
                ..o
            },
        );
        j.closed(6);
        assert!(j.counters.grown.load(Ordering::Relaxed) > 0);
        // What the supervisor holds (the last table it was given).
        let fd = last.lock().take().unwrap();
        let c = read(fd).unwrap().0;
        let want: Vec<(u64, u64)> = (2..20_000u64)
            .map(|i| match i {
                i if i >= 10_000 => (i, 2),
                i if i % 3 == 0 => (i, 0),
                i => (i, 1),
            })
            .collect();
        let got: Vec<(u64, u64)> = c.nodes.iter().map(|n| (n.0, n.1)).collect();
        assert_eq!(got, want);
        for (ino, _, rec) in &c.nodes {
            let want = if ino % 2 == 0 { *ino as u8 } else { 0 };
            assert_eq!(rec[0], want);
        }
        assert_eq!(c.opens, vec![(5, o)]);
    }

    #[test]
    fn counts_add_up_whatever_the_callers_guess_and_however_they_race() {
        let (j, last) = journal();
        j.set_recorder(Box::new(|ino, _| Some([ino as u8; JOURNAL_RECORD])));
        let j = Arc::new(j);
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let j = j.clone();
                std::thread::spawn(move || {
                    let mut rng = fastrand::Rng::with_seed(t);
                    for ino in 1..=5_000u64 {
                        j.remembered(ino, 1 + t, None, rng.bool());
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let g = last.lock();
        let (got, _) = read(g.as_ref().unwrap().try_clone().unwrap()).unwrap();
        assert_eq!(got.nodes.len(), 5_000);
        for (ino, count, rec) in &got.nodes {
            assert_eq!((*count, rec[0]), (1 + 2 + 3 + 4, *ino as u8), "inode {ino}");
        }
    }

    #[test]
    fn a_forgotten_node_named_again_is_recorded_anew() {
        // Its inode number may be another file's now.
        let (j, last) = journal();
        let file = Arc::new(std::sync::atomic::AtomicU8::new(1));
        let f = file.clone();
        j.set_recorder(Box::new(move |_, _| {
            let mut r = [0; JOURNAL_RECORD];
            r[0] = f.load(Ordering::Relaxed);
            Some(r)
        }));
        j.remembered(9, 1, None, true);
        file.store(2, Ordering::Relaxed);
        j.remembered(9, 1, None, false);
        let rec = |last: &Arc<Mutex<Option<OwnedFd>>>| {
            let g = last.lock();
            read(g.as_ref().unwrap().try_clone().unwrap())
                .unwrap()
                .0
                .nodes[0]
        };
        assert_eq!((rec(&last).1, rec(&last).2[0]), (2, 1), "held: kept");
        j.forgot(9, 2);
        assert_eq!((rec(&last).1, rec(&last).2[0]), (0, 1), "forgotten: kept");
        j.remembered(9, 1, None, false);
        assert_eq!((rec(&last).1, rec(&last).2[0]), (1, 2), "named again: anew");
    }
}
