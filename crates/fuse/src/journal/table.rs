//! The journal's storage: an open-addressing hash table of fixed-size
//! slots in a memfd, so that the supervisor (which holds the memfd) still
//! has it, complete, after the server dies at any instruction.
//!
//! # Layout (little-endian)
//! A header of [`HEADER`] bytes (magic, slot size, capacity), then
//! `capacity` slots of [`SLOT`] bytes: key (8), tag and value (8: the tag
//! in the top byte), record (24). Tag 0 is an empty slot, [`TOMB`] a
//! removed one that probes pass over.
//!
//! # Placement
//! A key's probe starts at a slot that depends on the magic: tables this
//! build makes ([`MAGIC`]) place each run of [`GROUP`] consecutive keys
//! in consecutive slots from one hashed start, so that the nodes of a
//! directory (on most file systems, inode numbers made together) share
//! cache lines and pages. Hashing every key alone ([`MAGIC_SPREAD`]
//! tables, still read and written where they put their keys until they
//! grow) makes each cold LOOKUP of a walk miss the cache and the TLB in
//! a table of megabytes (docs/results.md, after "The journal's cost").
//!
//! # Crash consistency
//! Writers hold the journal's lock, so a slot is only ever torn by the
//! server dying inside a write: a slot's key, value and record are
//! written before its tag, so a half-made slot reads as empty (the change
//! it was making is lost, as if the server had died just before it).
//! Growing writes a whole new table, gives it to the supervisor, and only
//! then writes to it: until the supervisor has it, the old one is
//! complete.

use std::os::fd::{AsFd, OwnedFd};
use uvfs_vfs::{JournalRecord, JOURNAL_RECORD};

/// Header bytes.
pub(crate) const HEADER: usize = 64;
/// Slot bytes.
pub(crate) const SLOT: usize = 16 + JOURNAL_RECORD;
/// Tables whose keys are placed in runs of [`GROUP`].
const MAGIC: &[u8; 8] = b"uvfsjrn2";
/// Tables whose keys are each placed alone (the previous layout).
const MAGIC_SPREAD: &[u8; 8] = b"uvfsjrn1";
/// Consecutive keys placed together: a run fits a few cache lines.
/// Longer runs overlap each other more often, and linear probing then
/// walks the overlaps (docs/results.md has the probe lengths simulated
/// for run lengths of 1 to 16).
const GROUP: u64 = 8;
/// Slots of a new table.
const MIN_CAP: usize = 4096;
/// The tag of a removed slot.
pub(crate) const TOMB: u8 = 0xff;
const VALUE_MASK: u64 = (1 << 56) - 1;

/// One live slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub tag: u8,
    pub key: u64,
    /// 56 bits.
    pub value: u64,
    pub rec: JournalRecord,
}

/// A table being written, mapped.
pub(crate) struct Table {
    fd: OwnedFd,
    /// The mapping of `fd`, whole.
    mem: &'static mut [u8],
    cap: usize,
    live: usize,
    tombs: usize,
    /// Keys placed in runs ([`MAGIC`]), not alone ([`MAGIC_SPREAD`]).
    grouped: bool,
}

fn hash(tag: u8, key: u64) -> u64 {
    (key ^ (u64::from(tag) << 56)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Table {
    /// An empty table with room for `cap` slots.
    pub fn new(cap: usize) -> std::io::Result<Table> {
        let cap = cap.max(MIN_CAP);
        let fd = rustix::fs::memfd_create("uvfs-journal", rustix::fs::MemfdFlags::CLOEXEC)?;
        let len = HEADER + cap * SLOT;
        rustix::fs::ftruncate(&fd, len as u64)?;
        // A grown table is filled at once, a new one in its first
        // seconds: its pages are made in one call, not a trap each.
        let mut t = Table::map(fd, cap, true, true)?;
        let h = t.bytes_mut(0, HEADER);
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&(SLOT as u32).to_le_bytes());
        h[16..24].copy_from_slice(&(cap as u64).to_le_bytes());
        Ok(t)
    }

    /// The table in memfd `fd` (a crashed server's), to go on writing:
    /// its layout checked, its slots counted, and each live one given to
    /// `each` on the way (one pass over the mapping, which a server
    /// recovering a million nodes pays while requests wait).
    pub fn open(fd: OwnedFd, mut each: impl FnMut(Slot)) -> std::io::Result<Table> {
        let (cap, grouped) = check(&fd)?;
        // Its pages mapped in one call: the scan below reads every one,
        // and a successor does it while requests wait, where faulting
        // them in a page at a time costs a trap per page.
        let mut t = Table::map(fd, cap, grouped, true)?;
        let (mut live, mut tombs) = (0, 0);
        for b in t.mem[HEADER..].chunks_exact(SLOT) {
            match b[15] {
                0 => {}
                TOMB => tombs += 1,
                _ => {
                    live += 1;
                    if let Some(s) = parse(b) {
                        each(s);
                    }
                }
            }
        }
        (t.live, t.tombs) = (live, tombs);
        Ok(t)
    }

    fn map(fd: OwnedFd, cap: usize, grouped: bool, populate: bool) -> std::io::Result<Table> {
        let len = HEADER + cap * SLOT;
        // SAFETY: a new shared mapping of a memfd of `len` bytes (made so,
        // or checked by `check`), at an address the kernel chooses: it
        // aliases nothing, so the slice over it is the only way to it;
        // `Drop` unmaps it, after the slice's last use.
        let mem = unsafe {
            let ptr = rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                match populate {
                    true => rustix::mm::MapFlags::SHARED | rustix::mm::MapFlags::POPULATE,
                    false => rustix::mm::MapFlags::SHARED,
                },
                &fd,
                0,
            )?;
            std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len)
        };
        Ok(Table {
            fd,
            mem,
            cap,
            live: 0,
            tombs: 0,
            grouped,
        })
    }

    fn bytes_mut(&mut self, at: usize, len: usize) -> &mut [u8] {
        &mut self.mem[at..at + len]
    }

    fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        self.bytes_mut(HEADER + i * SLOT, SLOT)
    }

    /// The memfd (for the supervisor).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Live slots.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Bytes the table takes.
    pub fn bytes(&self) -> usize {
        HEADER + self.cap * SLOT
    }

    fn read(&mut self, i: usize) -> (u8, u64, u64) {
        let s = self.slot_mut(i);
        let key = u64::from_le_bytes(s[0..8].try_into().expect("8 bytes"));
        let tv = u64::from_le_bytes(s[8..16].try_into().expect("8 bytes"));
        ((tv >> 56) as u8, key, tv & VALUE_MASK)
    }

    /// Index of the live slot of (`tag`, `key`), or of the first free one
    /// on its probe path (`Err`).
    fn find(&mut self, tag: u8, key: u64) -> Result<usize, usize> {
        let mut i = self.home(tag, key);
        let mut free = None;
        loop {
            let (t, k, _) = self.read(i);
            match t {
                0 => return Err(free.unwrap_or(i)),
                TOMB => {
                    free.get_or_insert(i);
                }
                _ if t == tag && k == key => return Ok(i),
                _ => {}
            }
            i += 1;
            if i == self.cap {
                i = 0;
            }
        }
    }

    /// Where the probe for (`tag`, `key`) starts.
    fn home(&self, tag: u8, key: u64) -> usize {
        let scale = |h: u64| ((u128::from(h) * self.cap as u128) >> 64) as usize;
        if !self.grouped {
            return scale(hash(tag, key));
        }
        let i = scale(hash(tag, key / GROUP)) + (key % GROUP) as usize;
        if i >= self.cap {
            i - self.cap
        } else {
            i
        }
    }

    /// The value of (`tag`, `key`), if live.
    pub fn get(&mut self, tag: u8, key: u64) -> Option<u64> {
        let i = self.find(tag, key).ok()?;
        Some(self.read(i).2)
    }

    /// Sets the value of a live slot.
    pub fn set_value(&mut self, tag: u8, key: u64, value: u64) -> bool {
        let Ok(i) = self.find(tag, key) else {
            return false;
        };
        let tv = (u64::from(tag) << 56) | (value & VALUE_MASK);
        self.slot_mut(i)[8..16].copy_from_slice(&tv.to_le_bytes());
        true
    }

    /// Whether one more slot fits without growing.
    pub fn has_room(&self) -> bool {
        (self.live + self.tombs + 1) * 5 <= self.cap * 4
    }

    /// The most live slots a table of `cap` slots holds (`has_room`).
    pub fn max_live(cap: usize) -> usize {
        cap * 4 / 5
    }

    /// Adds or replaces (`tag`, `key`); the table must have room.
    pub fn put(&mut self, s: &Slot) {
        let (i, _) = self.claim(s.tag, s.key);
        self.write(i, s);
    }

    /// The slot of (`tag`, `key`) and its value if live, else a free one
    /// on its probe path, counted live now (to be written at once).
    fn claim(&mut self, tag: u8, key: u64) -> (usize, Option<u64>) {
        match self.find(tag, key) {
            Ok(i) => (i, Some(self.read(i).2)),
            Err(i) => {
                if self.read(i).0 == TOMB {
                    self.tombs -= 1;
                }
                self.live += 1;
                (i, None)
            }
        }
    }

    fn write(&mut self, i: usize, s: &Slot) {
        let b = self.slot_mut(i);
        b[0..8].copy_from_slice(&s.key.to_le_bytes());
        b[16..SLOT].copy_from_slice(&s.rec);
        // The tag last: a slot torn by a crash reads as empty.
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
        let tv = (u64::from(s.tag) << 56) | (s.value & VALUE_MASK);
        b[8..16].copy_from_slice(&tv.to_le_bytes());
    }

    /// Adds `n` to the count of (`tag`, `key`) and gives it record
    /// `rec` (a slot holding 0, a node the kernel forgot, starts again
    /// from `n`), or makes it with count `n`, in one probe (a node new to
    /// the kernel is journaled on the path of every cold LOOKUP). The
    /// table must have room.
    pub fn add(&mut self, tag: u8, key: u64, n: u64, rec: &JournalRecord) {
        let (i, old) = self.claim(tag, key);
        let value = old.map_or(n, |v| v.saturating_add(n));
        self.write(
            i,
            &Slot {
                tag,
                key,
                value,
                rec: *rec,
            },
        );
    }

    /// Removes (`tag`, `key`) if live.
    pub fn remove(&mut self, tag: u8, key: u64) {
        if let Ok(i) = self.find(tag, key) {
            self.slot_mut(i)[15] = TOMB;
            self.live -= 1;
            self.tombs += 1;
        }
    }

    /// A table with room for `need` more slots holding this one's live
    /// slots (tombstones dropped).
    ///
    /// Half as large again as what it holds: two-thirds full after
    /// growing, four-fifths at the next growth, so past the first growth
    /// a live entry never takes more than one and a half slots (the
    /// journal's memory bound per node; doubling would allow two).
    pub fn grown(&mut self, need: usize) -> std::io::Result<Table> {
        let want = (self.live + need) * 3 / 2;
        let mut t = Table::new(want)?;
        for i in 0..self.cap {
            if let Some(s) = parse(self.slot_mut(i)) {
                t.put(&s);
            }
        }
        Ok(t)
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let len = self.mem.len();
        let ptr = self.mem.as_mut_ptr();
        // SAFETY: the mapping `map` made, of this length; `mem`, the only
        // reference to it, is not used after this.
        let _ = unsafe { rustix::mm::munmap(ptr.cast(), len) };
    }
}

fn parse(b: &[u8]) -> Option<Slot> {
    let tv = u64::from_le_bytes(b[8..16].try_into().ok()?);
    let tag = (tv >> 56) as u8;
    if tag == 0 || tag == TOMB {
        return None;
    }
    Some(Slot {
        tag,
        key: u64::from_le_bytes(b[0..8].try_into().ok()?),
        value: tv & VALUE_MASK,
        rec: b[16..SLOT].try_into().ok()?,
    })
}

/// The capacity of the journal table in memfd `fd`, whose header says it
/// is one of this build's layout and whose size matches (a crashed
/// server's: it may be anything).
/// And whether its keys are placed in runs (see "Placement").
pub(crate) fn check(fd: &impl AsFd) -> std::io::Result<(usize, bool)> {
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    let size = rustix::fs::fstat(fd)?.st_size as usize;
    if size < HEADER {
        return Err(bad("not a uvfs journal"));
    }
    let mut h = [0u8; HEADER];
    let mut at = 0;
    while at < HEADER {
        let n = rustix::io::pread(fd, &mut h[at..], at as u64)?;
        if n == 0 {
            return Err(bad("the journal is shorter than its size"));
        }
        at += n;
    }
    let grouped = match &h[0..8] {
        m if m == MAGIC => true,
        m if m == MAGIC_SPREAD => false,
        _ => return Err(bad("not a uvfs journal")),
    };
    let slot = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) as usize;
    let cap = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes")) as usize;
    if slot != SLOT || cap.checked_mul(SLOT).and_then(|n| n.checked_add(HEADER)) != Some(size) {
        return Err(bad("the journal's layout is not this build's"));
    }
    Ok((cap, grouped))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every live slot of the table in `fd`, as a server started after a
    /// crash reads it.
    fn read_all(fd: impl AsFd) -> std::io::Result<Vec<Slot>> {
        let mut v = Vec::new();
        Table::open(fd.as_fd().try_clone_to_owned()?, |s| v.push(s))?;
        Ok(v)
    }

    fn slot(tag: u8, key: u64, value: u64) -> Slot {
        let mut rec = [0; JOURNAL_RECORD];
        rec[0] = key as u8;
        Slot {
            tag,
            key,
            value,
            rec,
        }
    }

    #[test]
    fn slots_read_back_from_the_memfd_through_growth_and_removal() {
        let mut t = Table::new(0).unwrap();
        let mut model = std::collections::HashMap::new();
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..40_000 {
            let (tag, key) = (rng.u8(1..4), rng.u64(0..3000));
            if rng.u8(0..3) == 0 {
                t.remove(tag, key);
                model.remove(&(tag, key));
            } else {
                if !t.has_room() {
                    t = t.grown(1).unwrap();
                }
                let v = rng.u64(0..1 << 56);
                t.put(&slot(tag, key, v));
                model.insert((tag, key), v);
            }
        }
        assert_eq!(t.live(), model.len());
        let mut got: Vec<_> = read_all(t.fd())
            .unwrap()
            .into_iter()
            .map(|s| {
                assert_eq!(s.rec[0], s.key as u8);
                ((s.tag, s.key), s.value)
            })
            .collect();
        got.sort();
        let mut want: Vec<_> = model.into_iter().collect();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn a_table_past_its_first_growth_takes_at_most_64_bytes_an_entry() {
        let mut t = Table::new(0).unwrap();
        let mut worst = 0.0f64;
        for key in 0..200_000u64 {
            if !t.has_room() {
                t = t.grown(1).unwrap();
            }
            t.put(&slot(1, key, key));
            if t.cap > MIN_CAP {
                worst = worst.max(t.bytes() as f64 / t.live() as f64);
            }
        }
        assert!(t.cap > MIN_CAP, "the table never grew");
        assert!(worst <= 64.0, "{worst:.1} bytes an entry");
    }

    /// A table as the builds before runs of keys made it.
    fn spread_table() -> Table {
        let mut t = Table::new(0).unwrap();
        t.bytes_mut(0, 8).copy_from_slice(MAGIC_SPREAD);
        t.grouped = false;
        t
    }

    #[test]
    fn a_run_of_consecutive_keys_shares_cache_lines() {
        let mut t = Table::new(0).unwrap();
        let start = 800;
        for key in start..start + GROUP {
            t.put(&slot(1, key, key));
        }
        let at: Vec<usize> = (start..start + GROUP)
            .map(|k| t.find(1, k).unwrap())
            .collect();
        let first = at[0];
        for (n, i) in at.iter().enumerate() {
            assert_eq!(*i, (first + n) % t.cap, "{at:?}");
        }
        assert!(t.grouped);
        assert!(check(&t.fd()).unwrap().1);
    }

    #[test]
    fn a_previous_builds_table_is_read_and_written_where_it_placed_keys() {
        let mut t = spread_table();
        let mut rng = fastrand::Rng::with_seed(3);
        let keys: Vec<u64> = (0..3000).map(|_| rng.u64(0..1 << 40)).collect();
        for &k in &keys {
            t.put(&slot(1, k, k & 0xffff));
        }
        // As a server started after a crash takes it over: every key
        // found where that build put it, and changed in place.
        let mut back = Table::open(t.fd().try_clone_to_owned().unwrap(), |_| {}).unwrap();
        assert!(!back.grouped);
        assert_eq!(back.live(), keys.len());
        for &k in &keys {
            assert_eq!(back.get(1, k), Some(k & 0xffff));
            assert!(back.set_value(1, k, 1));
        }
        assert_eq!(back.live(), keys.len());
        // Grown, it is this build's kind and still holds them all.
        let mut g = back.grown(1).unwrap();
        assert!(g.grouped);
        for &k in &keys {
            assert_eq!(g.get(1, k), Some(1));
        }
        assert_eq!(read_all(g.fd()).unwrap().len(), keys.len());
    }

    #[test]
    fn a_half_written_slot_reads_as_absent_and_garbage_is_refused() {
        let mut t = Table::new(0).unwrap();
        t.put(&slot(1, 5, 9));
        assert_eq!(t.get(1, 5), Some(9));
        // A write torn before its tag: the slot is empty.
        let i = t.find(1, 6).unwrap_err();
        t.slot_mut(i)[0..8].copy_from_slice(&6u64.to_le_bytes());
        assert_eq!(read_all(t.fd()).unwrap().len(), 1);
        let f = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::io::write(
            &f,
            b"not a journal at all, but long enough to have a header....",
        )
        .unwrap();
        assert!(read_all(&f).is_err());
    }
}
