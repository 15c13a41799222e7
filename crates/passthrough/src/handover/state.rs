//! The saved state's encoding (format [`FORMAT`]): a header of serde
//! types written with bincode, then the node tables as they are
//! (`table.rs`). Read back only by a successor that knows this exact
//! format; anything that does not decode completely, or does not hold
//! together ([`State::check`]), is refused, never half-read.

use super::table::{Entry, Table, Way};
use crate::handle::Handle;
use crate::inodes::ForeignIds;
use serde::{Deserialize, Serialize};
use uvfs_vfs::Ino;

/// The name and version of this encoding. A change to any type below is
/// a new version.
pub(crate) const FORMAT: &str = "uvfs-passthrough/1";

/// [`FORMAT`] with open files sent parked (`park.rs`): `SavedOpen::fd`
/// holds [`PARKED`] and the flags to open the file again with. Written
/// only by a state holding one, so that builds before it, which refuse
/// such an index, still read every other state; and they refuse this
/// one by its name first.
pub(crate) const FORMAT_PARKED: &str = "uvfs-passthrough/2";

/// Set in `SavedOpen::fd` of an open file sent without an fd: the rest
/// of the word is its `F_GETFL` flags.
pub(crate) const PARKED: u32 = 1 << 31;

/// Handle bytes kept in place (most file systems' handles).
const SMALL: usize = 16;

/// Everything a successor needs (see `handover/mod.rs`) but the node
/// tables, which follow it in the saved bytes as they are (`table.rs`):
/// the kept nodes' records and outside bytes, then the remembered
/// handles' (`Runs`).
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct State {
    /// What the source root was: the successor must serve the same.
    pub root: RootId,
    /// Foreign ids and aliases (`inodes.rs`).
    pub foreign: ForeignIds,
    /// Kept open files and directories.
    pub opens: Vec<SavedOpen>,
    /// Lock owners' descriptions of kept open files' nodes (`locks.rs`).
    pub locks: Vec<SavedLock>,
    /// The next open-file handle number.
    pub next_fh: u64,
    /// `PtCounters`, in declaration order.
    pub counters: Vec<u64>,
    /// The lengths of the four runs after this header.
    pub runs: [u64; 4],
}

/// Where the four byte runs after the header lie in the saved bytes:
/// kept nodes (records sorted by id, outside bytes), remembered handles
/// (records oldest first, outside bytes).
pub(crate) type Runs = [std::ops::Range<usize>; 4];

/// The source root's identity.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub(crate) struct RootId {
    pub dev: u64,
    pub ino: u64,
    pub handle: Option<SavedHandle>,
}

/// A file handle without its mount id: the successor's own opener
/// names the mount (the same one, since the root is the same file).
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq, Clone)]
pub(crate) struct SavedHandle {
    pub htype: i32,
    len: u8,
    small: [u8; SMALL],
    big: Vec<u8>,
}

impl SavedHandle {
    pub fn of(h: &Handle) -> SavedHandle {
        let b = h.bytes();
        let mut small = [0; SMALL];
        let (len, big) = if b.len() <= SMALL {
            small[..b.len()].copy_from_slice(b);
            (b.len() as u8, Vec::new())
        } else {
            (u8::MAX, b.to_vec())
        };
        SavedHandle {
            htype: h.htype(),
            len,
            small,
            big,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match usize::from(self.len) {
            n if n <= SMALL => &self.small[..n],
            _ => &self.big,
        }
    }

    /// The handle, made on the mount `mount_id`.
    pub fn handle(&self, mount_id: i32) -> Handle {
        Handle::from_parts(self.htype, mount_id, self.bytes())
    }

    fn well_formed(&self) -> bool {
        let n = usize::from(self.len);
        (n <= SMALL && self.big.is_empty()) || (n == usize::from(u8::MAX) && self.big.len() > SMALL)
    }
}

/// A kept open file or directory.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct SavedOpen {
    pub fh: u64,
    pub node: Ino,
    /// The node's backing file, which `fd` must be.
    pub dev: u64,
    pub ino: u64,
    /// Index into `Saved::fds`: a duplicate of the open's fd (the same
    /// open file description); or, in [`FORMAT_PARKED`], [`PARKED`] and
    /// the flags the successor opens the file again with when it needs
    /// an fd for it.
    pub fd: u32,
    /// The mount removed the file's last name (`Node::mark_removed`).
    pub removed: bool,
    /// `Node::set_orphan`.
    pub orphan: bool,
}

/// A lock owner's description (`lock_owners.rs`).
#[derive(Serialize, Deserialize, Debug)]
pub(crate) struct SavedLock {
    pub node: Ino,
    pub owner: u64,
    /// The open file it was made through.
    pub fh: u64,
    /// Index into `Saved::fds`.
    pub fd: u32,
}

fn options() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
}

/// The tables `runs` (of `bytes`) hold: kept nodes, remembered handles.
pub(crate) fn tables<'a>(bytes: &'a [u8], runs: &Runs) -> (Table<'a>, Table<'a>) {
    let run = |i: usize| bytes.get(runs[i].clone()).unwrap_or_default();
    (
        Table {
            recs: run(0),
            extra: run(1),
        },
        Table {
            recs: run(2),
            extra: run(3),
        },
    )
}

impl State {
    /// The header, then `runs` as they are.
    pub fn encode(mut self, runs: [&[u8]; 4]) -> Result<Vec<u8>, String> {
        use bincode::Options;
        self.runs = runs.map(|r| r.len() as u64);
        let header = options().serialize(&self).map_err(|e| e.to_string())?;
        let mut out =
            Vec::with_capacity(header.len() + runs.iter().map(|r| r.len()).sum::<usize>());
        out.extend_from_slice(&header);
        for r in runs {
            out.extend_from_slice(r);
        }
        Ok(out)
    }

    /// The header's length: fixed by the state's lists, not by the runs'
    /// lengths (integers are written fixed-width), so a state can be
    /// written runs first, header last, with no copy of the runs.
    pub fn header_len(&self) -> Result<usize, String> {
        use bincode::Options;
        options()
            .serialized_size(self)
            .map(|n| n as usize)
            .map_err(|e| e.to_string())
    }

    /// Writes the header, for runs of `lens` bytes that follow it, over
    /// `out`, which must be [`header_len`](Self::header_len) long.
    pub fn write_header(mut self, out: &mut [u8], lens: [usize; 4]) -> Result<(), String> {
        use bincode::Options;
        self.runs = lens.map(|l| l as u64);
        let header = options().serialize(&self).map_err(|e| e.to_string())?;
        if header.len() != out.len() {
            return Err(format!(
                "a header of {} bytes where {} were kept",
                header.len(),
                out.len()
            ));
        }
        out.copy_from_slice(&header);
        Ok(())
    }

    /// Decodes the header, never allocating more than `bytes` could
    /// describe; the runs must fill the rest of `bytes` exactly.
    /// The source root's identity alone (the header's first field),
    /// without reading the rest.
    pub fn root_of(bytes: &[u8]) -> Result<RootId, String> {
        use bincode::Options;
        options()
            .with_limit(bytes.len() as u64)
            .deserialize_from(bytes)
            .map_err(|e| e.to_string())
    }

    pub fn decode(bytes: &[u8]) -> Result<(State, Runs), String> {
        use bincode::Options;
        let mut rest = bytes;
        let st: State = options()
            .with_limit(bytes.len() as u64)
            .deserialize_from(&mut rest)
            .map_err(|e| e.to_string())?;
        let mut at = bytes.len() - rest.len();
        let mut runs: Runs = Default::default();
        for (i, &len) in st.runs.iter().enumerate() {
            let end = usize::try_from(len)
                .ok()
                .and_then(|l| at.checked_add(l))
                .filter(|&e| e <= bytes.len())
                .ok_or("a table runs past the end")?;
            runs[i] = at..end;
            at = end;
        }
        if at != bytes.len() {
            return Err(format!("{} bytes after the tables", bytes.len() - at));
        }
        Ok((st, runs))
    }

    /// Whether the state holds together: node tables well formed (kept
    /// nodes sorted), handles well formed, fd indexes below `fds`, parked
    /// opens only where `parked` (the format allows them).
    pub fn check(
        &self,
        bytes: &[u8],
        runs: &Runs,
        fds: usize,
        counters: usize,
        parked: bool,
    ) -> Result<(), String> {
        let (nodes, remembered) = tables(bytes, runs);
        nodes.check(true)?;
        remembered.check(false)?;
        for i in 0..remembered.len() {
            if !matches!(
                remembered.get(i),
                Some(Entry {
                    way: Way::Handle { .. },
                    ..
                })
            ) {
                return Err(format!("remembered entry {i} is not a handle"));
            }
        }
        if let Some(h) = &self.root.handle {
            if !h.well_formed() {
                return Err("malformed root handle".into());
            }
        }
        let fd_ok = |i: u32| (i as usize) < fds;
        let open_ok = |i: u32| fd_ok(i) || (parked && i & PARKED != 0);
        if !self.opens.iter().all(|o| open_ok(o.fd)) || !self.locks.iter().all(|l| fd_ok(l.fd)) {
            return Err(format!("an fd index is beyond the {fds} fds passed"));
        }
        if self.counters.len() != counters {
            return Err(format!(
                "{} counters, this version has {counters}",
                self.counters.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_keep_their_bytes_small_or_large() {
        for len in [0, 8, 12, SMALL, SMALL + 1, 40, 128] {
            let bytes: Vec<u8> = (0..len as u8).collect();
            let h = Handle::from_parts(7, 3, &bytes);
            let s = SavedHandle::of(&h);
            assert!(s.well_formed());
            assert_eq!(s.bytes(), &bytes[..]);
            assert_eq!(s.handle(3), h);
        }
    }
}
