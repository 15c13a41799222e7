//! A table of nodes' ways back (`node::Way`) as fixed-size records, so
//! that a million of them encode as one copy and decode as none: the
//! successor searches the records in the saved bytes themselves.
//!
//! # Record (little-endian, [`REC`] bytes)
//! | bytes | field |
//! |---|---|
//! | 0..8 | node id |
//! | 8 | type (`VType as u8`) |
//! | 9 | way: [`FD_ONLY`], [`HANDLE`] (bytes in place), [`HANDLE_EXTRA`], [`PATH`] |
//! | 10..12 | handle or name length |
//! | 12..16 | handle type |
//! | 16..32 | handle bytes in place; or at 16..24 the offset in `extra` of a larger handle; or the parent's id at 16..24 and the name's offset in `extra` at 24..32 |

use uvfs_vfs::{Ino, VType};

/// Bytes per record.
pub(crate) const REC: usize = 32;
/// Handle bytes kept in the record itself (ext4 8, xfs 8 or 12, tmpfs 12).
const INLINE: usize = 16;
/// `MAX_HANDLE_SZ`.
const MAX_HANDLE: usize = 128;

const FD_ONLY: u8 = 0;
const HANDLE: u8 = 1;
const HANDLE_EXTRA: u8 = 2;
const PATH: u8 = 3;

/// One node's way back, as stored.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum Way<'a> {
    FdOnly,
    Handle { htype: i32, bytes: &'a [u8] },
    Path { parent: Ino, name: &'a [u8] },
}

/// One record.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub id: Ino,
    /// `VType as u8`.
    pub kind: u8,
    pub way: Way<'a>,
}

/// The record of `e` (safe to make on many threads at once). Bytes it
/// keeps outside the record go to `extra` with its id; [`finish`] places
/// them.
pub(crate) fn record(e: &Entry<'_>, extra: &mut dyn FnMut(Ino, &[u8])) -> [u8; REC] {
    let mut r = [0u8; REC];
    r[0..8].copy_from_slice(&e.id.to_le_bytes());
    r[8] = e.kind;
    match e.way {
        Way::FdOnly => r[9] = FD_ONLY,
        Way::Handle { htype, bytes } => {
            r[10..12].copy_from_slice(&(bytes.len() as u16).to_le_bytes());
            r[12..16].copy_from_slice(&htype.to_le_bytes());
            if bytes.len() <= INLINE {
                r[9] = HANDLE;
                r[16..16 + bytes.len()].copy_from_slice(bytes);
            } else {
                r[9] = HANDLE_EXTRA;
                extra(e.id, bytes);
            }
        }
        Way::Path { parent, name } => {
            r[9] = PATH;
            r[10..12].copy_from_slice(&(name.len() as u16).to_le_bytes());
            r[16..24].copy_from_slice(&parent.to_le_bytes());
            extra(e.id, name);
        }
    }
    r
}

/// A node's record in the crash journal (`uvfs_vfs::JournalRecord`: a
/// record without its id, which is the journal's key), if the record
/// holds all of it: a handle kept in place.
pub(crate) fn journal_record(e: &Entry<'_>) -> Option<uvfs_vfs::JournalRecord> {
    match e.way {
        Way::Handle { bytes, .. } if bytes.len() <= INLINE => {
            let r = record(e, &mut |_, _| {});
            r[8..].try_into().ok()
        }
        _ => None,
    }
}

/// The record of node `id` from its journal record, if that is a well
/// formed one of a handle kept in place.
pub(crate) fn from_journal(id: Ino, j: &uvfs_vfs::JournalRecord) -> Option<[u8; REC]> {
    let mut r = [0u8; REC];
    r[0..8].copy_from_slice(&id.to_le_bytes());
    r[8..].copy_from_slice(j);
    let t = Table {
        recs: &r,
        extra: &[],
    };
    let ok = r[9] == HANDLE
        && VType::from_u8(r[8]) != VType::Non
        && t.get(0)
            .is_some_and(|e| matches!(e.way, Way::Handle { .. }));
    ok.then_some(r)
}

/// The handle (type, bytes) that record `r` keeps in place, if it is of
/// a node found by a handle.
pub(crate) fn handle_in(r: &[u8; REC]) -> Option<(i32, &[u8])> {
    let t = Table {
        recs: r,
        extra: &[],
    };
    match t.get(0)?.way {
        Way::Handle { htype, bytes } => Some((htype, bytes)),
        _ => None,
    }
}

/// Whether record `r` is of a node found by its path.
pub(crate) fn is_path(r: &[u8; REC]) -> bool {
    r[9] == PATH
}

/// The id of a record.
pub(crate) fn id_of(r: &[u8; REC]) -> Ino {
    u64_at(r, 0)
}

/// Places the bytes records keep outside them (`extras`, by id, as
/// [`record`] gave them) and returns them: `recs` need not be sorted,
/// but hold one record per id.
pub(crate) fn finish(recs: &mut [[u8; REC]], mut extras: Vec<(Ino, Box<[u8]>)>) -> Vec<u8> {
    let mut blob = Vec::new();
    if extras.is_empty() {
        return blob;
    }
    extras.sort_unstable_by_key(|(id, _)| *id);
    for r in recs.iter_mut() {
        let at = match r[9] {
            PATH => 24,
            HANDLE_EXTRA => 16,
            _ => continue,
        };
        let id = id_of(r);
        if let Ok(i) = extras.binary_search_by_key(&id, |(k, _)| *k) {
            r[at..at + 8].copy_from_slice(&(blob.len() as u64).to_le_bytes());
            blob.extend_from_slice(&extras[i].1);
        }
    }
    blob
}

/// Records of `entries` in the order given, and their outside bytes.
#[cfg(test)]
pub(crate) fn write(entries: &[Entry<'_>]) -> (Vec<u8>, Vec<u8>) {
    let mut extras = Vec::new();
    let mut recs: Vec<[u8; REC]> = entries
        .iter()
        .map(|e| record(e, &mut |id, b| extras.push((id, b.into()))))
        .collect();
    let blob = finish(&mut recs, extras);
    (recs.into_flattened(), blob)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Records as saved.
#[derive(Clone, Copy)]
pub(crate) struct Table<'a> {
    pub recs: &'a [u8],
    pub extra: &'a [u8],
}

impl<'a> Table<'a> {
    pub fn len(&self) -> usize {
        self.recs.len() / REC
    }

    /// Record `i`; `None` if it is malformed.
    pub fn get(&self, i: usize) -> Option<Entry<'a>> {
        let r = self.recs.get(i * REC..(i + 1) * REC)?;
        let len = usize::from(u16::from_le_bytes([r[10], r[11]]));
        let from_extra = |at: usize, max: usize| {
            let off = usize::try_from(u64_at(r, at)).ok()?;
            (len <= max).then_some(())?;
            self.extra.get(off..off.checked_add(len)?)
        };
        let way = match r[9] {
            FD_ONLY => Way::FdOnly,
            HANDLE if len <= INLINE => Way::Handle {
                htype: i32::from_le_bytes([r[12], r[13], r[14], r[15]]),
                bytes: &r[16..16 + len],
            },
            HANDLE_EXTRA => Way::Handle {
                htype: i32::from_le_bytes([r[12], r[13], r[14], r[15]]),
                bytes: from_extra(16, MAX_HANDLE)?,
            },
            PATH => Way::Path {
                parent: u64_at(r, 16),
                name: from_extra(24, usize::MAX)?,
            },
            _ => return None,
        };
        Some(Entry {
            id: u64_at(r, 0),
            kind: r[8],
            way,
        })
    }

    /// The record of node `id` (the records sorted by id).
    pub fn find(&self, id: Ino) -> Option<Entry<'a>> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let m = u64_at(self.recs, mid * REC);
            if m < id {
                lo = mid + 1;
            } else if m > id {
                hi = mid;
            } else {
                return self.get(mid);
            }
        }
        None
    }

    /// Whether every record is well formed (and, if `sorted`, ids
    /// strictly increase): what `get` and `find` rely on to find what
    /// was saved.
    pub fn check(&self, sorted: bool) -> Result<(), String> {
        if !self.recs.len().is_multiple_of(REC) {
            return Err("a node table's length is not a whole number of records".into());
        }
        let mut last = None;
        for i in 0..self.len() {
            let e = self
                .get(i)
                .ok_or_else(|| format!("node record {i} is malformed"))?;
            if VType::from_u8(e.kind) == VType::Non {
                return Err(format!("node {}: unknown type {}", e.id, e.kind));
            }
            match e.way {
                Way::Handle { bytes, .. } if bytes.len() > MAX_HANDLE => {
                    return Err(format!("node {}: handle too long", e.id))
                }
                Way::Path { name, .. }
                    if uvfs_vfs::check_name(name).is_err() || uvfs_vfs::is_dot_or_dotdot(name) =>
                {
                    return Err(format!("node {}: invalid name", e.id))
                }
                _ => {}
            }
            if sorted && last.is_some_and(|l| l >= e.id) {
                return Err("kept nodes are not sorted by id".into());
            }
            last = Some(e.id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        let big: Vec<u8> = (0..40).collect();
        let entries = [
            Entry {
                id: 3,
                kind: 2,
                way: Way::FdOnly,
            },
            Entry {
                id: 5,
                kind: 1,
                way: Way::Handle {
                    htype: 1,
                    bytes: &[1, 2, 3, 4, 5, 6, 7, 8],
                },
            },
            Entry {
                id: 9,
                kind: 1,
                way: Way::Handle {
                    htype: 0x81,
                    bytes: &big,
                },
            },
            Entry {
                id: 12,
                kind: 3,
                way: Way::Path {
                    parent: 3,
                    name: b"link",
                },
            },
            Entry {
                id: 20,
                kind: 1,
                way: Way::Handle {
                    htype: 1,
                    bytes: &[7; 16],
                },
            },
        ];
        let (recs, extra) = write(&entries);
        let t = Table {
            recs: &recs,
            extra: &extra,
        };
        t.check(true).unwrap();
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(t.get(i), Some(*e));
            assert_eq!(t.find(e.id), Some(*e));
        }
        assert_eq!(t.find(4), None);
        assert_eq!(t.find(21), None);
        // Out of order, truncated, or pointing outside: refused.
        let (r2, x2) = write(&[entries[1], entries[0]]);
        assert!(Table {
            recs: &r2,
            extra: &x2
        }
        .check(true)
        .is_err());
        assert!(Table {
            recs: &recs[..REC * 2 + 3],
            extra: &extra
        }
        .check(true)
        .is_err());
        assert!(Table {
            recs: &recs,
            extra: &extra[..10]
        }
        .check(true)
        .is_err());
    }
}
