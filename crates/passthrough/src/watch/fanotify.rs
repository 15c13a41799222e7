//! fanotify with file identities: a group that reports, for every change
//! on one file system, the changed object's file handle and, for changes
//! of a directory's entries, the directory's handle and the name.
//!
//! A file-system mark (`FAN_MARK_FILESYSTEM`) sees changes made through
//! any mount of the file system by any process, with no watch per
//! directory (inotify needs one per directory, bounded by
//! `max_user_watches`). It needs `CAP_SYS_ADMIN`, and a file system that
//! can encode file handles for fanotify (ext4, xfs, btrfs, tmpfs; not NFS
//! or FUSE).

use crate::sys;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use uvfs_vfs::VfsResult;

/// What is watched: every kind of change that a mount's cache keeps.
/// Moves come as a `MOVED_FROM` and a `MOVED_TO` (one per name).
pub(crate) const MASK: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_ATTRIB
    | libc::FAN_MODIFY
    | libc::FAN_CLOSE_WRITE
    | libc::FAN_DELETE_SELF
    | libc::FAN_MOVE_SELF
    | libc::FAN_ONDIR;

/// Changes of a directory's entries (reported with the directory and name).
pub(crate) const DIRENT: u64 =
    libc::FAN_CREATE | libc::FAN_DELETE | libc::FAN_MOVED_FROM | libc::FAN_MOVED_TO;

/// Changes of a file's contents.
pub(crate) const DATA: u64 = libc::FAN_MODIFY | libc::FAN_CLOSE_WRITE;

/// A fanotify group marked on one file system.
pub(crate) struct Group {
    fd: OwnedFd,
}

impl Group {
    /// A group reporting directory handles with names and object handles,
    /// with the file system that `path` is on marked.
    pub(crate) fn new(path: &std::ffi::CStr) -> VfsResult<Group> {
        let flags = libc::FAN_CLASS_NOTIF
            | libc::FAN_CLOEXEC
            | libc::FAN_NONBLOCK
            | libc::FAN_REPORT_DFID_NAME
            | libc::FAN_REPORT_FID;
        // SAFETY: plain flag words; the kernel returns a new fd or -1.
        let fd = sys::owned(unsafe {
            libc::fanotify_init(flags, (libc::O_RDONLY | libc::O_LARGEFILE) as libc::c_uint)
        })?;
        let g = Group { fd };
        // SAFETY: `path` is NUL-terminated; the kernel only reads it.
        sys::cvt(unsafe {
            libc::fanotify_mark(
                g.fd.as_raw_fd(),
                libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
                MASK,
                libc::AT_FDCWD,
                path.as_ptr(),
            )
        })?;
        Ok(g)
    }

    /// The group's fd (to poll).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Reads what events are queued into `buf`; `Ok(0)` when none are.
    pub(crate) fn read(&self, buf: &mut [u8]) -> VfsResult<usize> {
        match rustix::io::read(&self.fd, buf) {
            Ok(n) => Ok(n),
            Err(rustix::io::Errno::AGAIN) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}

/// A file identity as fanotify reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fid<'a> {
    /// `handle_type` of the `struct file_handle`.
    pub htype: i32,
    /// Its bytes.
    pub bytes: &'a [u8],
}

/// One event, its records borrowed from the read buffer.
#[derive(Debug, Default)]
pub(crate) struct Event<'a> {
    /// `FAN_*` bits.
    pub mask: u64,
    /// The process that made the change.
    pub pid: i32,
    /// The directory and the entry's name (`DFID_NAME`).
    pub dir: Option<(Fid<'a>, &'a [u8])>,
    /// The object changed (`FID`): for entry changes, the directory.
    pub obj: Option<Fid<'a>>,
}

/// `struct fanotify_event_metadata`'s size.
const META: usize = 24;
/// `FAN_EVENT_METADATA_VERSION`.
const VERSION: u8 = 3;
/// `FAN_EVENT_INFO_TYPE_FID`, `_DFID_NAME`, `_DFID`.
const INFO_FID: u8 = 1;
const INFO_DFID_NAME: u8 = 2;
const INFO_DFID: u8 = 3;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The events in `buf` (what one read returned). A malformed event ends
/// the walk: the caller treats what it could not read as lost changes.
pub(crate) struct Events<'a> {
    buf: &'a [u8],
    at: usize,
    /// Set when a malformed event ended the walk early.
    pub malformed: bool,
}

impl<'a> Events<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Events<'a> {
        Events {
            buf,
            at: 0,
            malformed: false,
        }
    }
}

impl<'a> Iterator for Events<'a> {
    type Item = Event<'a>;

    fn next(&mut self) -> Option<Event<'a>> {
        let rest = self.buf.get(self.at..)?;
        if rest.is_empty() {
            return None;
        }
        match parse_one(rest) {
            Some((ev, len)) => {
                self.at += len;
                Some(ev)
            }
            None => {
                self.malformed = true;
                self.at = self.buf.len();
                None
            }
        }
    }
}

/// The event at the start of `b` and its length.
fn parse_one(b: &[u8]) -> Option<(Event<'_>, usize)> {
    let len = u32_at(b, 0)? as usize;
    if len < META || len > b.len() || b[4] != VERSION {
        return None;
    }
    let meta_len = usize::from(u16_at(b, 6)?);
    if meta_len < META || meta_len > len {
        return None;
    }
    let mut ev = Event {
        mask: u64_at(b, 8)?,
        pid: u32_at(b, 20)? as i32,
        ..Event::default()
    };
    let mut at = meta_len;
    while at + 4 <= len {
        let info_type = b[at];
        let info_len = usize::from(u16_at(b, at + 2)?);
        if info_len < 4 || at + info_len > len {
            return None;
        }
        let rec = &b[at..at + info_len];
        match info_type {
            INFO_FID | INFO_DFID | INFO_DFID_NAME => {
                let (fid, name) = parse_fid(rec, info_type == INFO_DFID_NAME)?;
                match (info_type, name) {
                    (INFO_DFID_NAME, Some(n)) => ev.dir = Some((fid, n)),
                    (INFO_FID, _) => ev.obj = Some(fid),
                    _ => {}
                }
            }
            // Other records (a pidfd, an error count) are not asked for.
            _ => {}
        }
        at += info_len;
    }
    Some((ev, len))
}

/// A FID record: header (4), fsid (8), `file_handle` header (8), the
/// handle, then (with a name) the NUL-terminated name.
fn parse_fid(rec: &[u8], named: bool) -> Option<(Fid<'_>, Option<&[u8]>)> {
    let hbytes = u32_at(rec, 12)? as usize;
    let htype = u32_at(rec, 16)? as i32;
    let start: usize = 20;
    let bytes = rec.get(start..start.checked_add(hbytes)?)?;
    let name = if named {
        let tail = rec.get(start + hbytes..)?;
        let end = tail.iter().position(|&c| c == 0)?;
        Some(&tail[..end])
    } else {
        None
    };
    Some((Fid { htype, bytes }, name))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An event as the kernel lays it out, for parser tests.
    pub(crate) fn encode(
        mask: u64,
        pid: i32,
        dir: Option<(&[u8], &[u8])>,
        obj: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut recs = Vec::new();
        let mut fid = |t: u8, h: &[u8], name: Option<&[u8]>| {
            let mut r = vec![t, 0, 0, 0];
            r.extend_from_slice(&[0u8; 8]); // fsid
            r.extend_from_slice(&(h.len() as u32).to_ne_bytes());
            r.extend_from_slice(&1i32.to_ne_bytes());
            r.extend_from_slice(h);
            if let Some(n) = name {
                r.extend_from_slice(n);
                r.push(0);
            }
            while r.len() % 4 != 0 {
                r.push(0);
            }
            let l = r.len() as u16;
            r[2..4].copy_from_slice(&l.to_ne_bytes());
            recs.extend_from_slice(&r);
        };
        if let Some((h, n)) = dir {
            fid(INFO_DFID_NAME, h, Some(n));
        }
        if let Some(h) = obj {
            fid(INFO_FID, h, None);
        }
        let len = META + recs.len();
        let mut e = Vec::with_capacity(len);
        e.extend_from_slice(&(len as u32).to_ne_bytes());
        e.push(VERSION);
        e.push(0);
        e.extend_from_slice(&(META as u16).to_ne_bytes());
        e.extend_from_slice(&mask.to_ne_bytes());
        e.extend_from_slice(&(-1i32).to_ne_bytes());
        e.extend_from_slice(&pid.to_ne_bytes());
        e.extend_from_slice(&recs);
        e
    }

    #[test]
    fn events_and_their_records_parse() {
        let mut buf = encode(
            libc::FAN_CREATE,
            42,
            Some((&[1, 0, 0, 0, 9, 9, 9, 9], b"name")),
            None,
        );
        buf.extend(encode(
            libc::FAN_ATTRIB,
            7,
            None,
            Some(&[5, 0, 0, 0, 1, 1, 1, 1]),
        ));
        let mut it = Events::new(&buf);
        let a = it.next().unwrap();
        assert_eq!((a.mask, a.pid), (libc::FAN_CREATE, 42));
        let (d, n) = a.dir.unwrap();
        assert_eq!(
            (d.htype, d.bytes, n),
            (1, &[1, 0, 0, 0, 9, 9, 9, 9][..], &b"name"[..])
        );
        assert!(a.obj.is_none());
        let b = it.next().unwrap();
        assert_eq!(b.obj.unwrap().bytes, &[5, 0, 0, 0, 1, 1, 1, 1]);
        assert!(it.next().is_none());
        assert!(!it.malformed);
    }

    #[test]
    fn a_malformed_event_ends_the_walk_and_says_so() {
        let good = encode(libc::FAN_MODIFY, 1, None, Some(&[1, 2, 3, 4]));
        for cut in [1, 10, META + 3, good.len() - 1] {
            let mut it = Events::new(&good[..cut]);
            assert!(it.next().is_none(), "cut {cut}");
            assert!(it.malformed, "cut {cut}");
        }
        // A record claiming more than its event holds.
        let mut bad = good.clone();
        bad[META + 2..META + 4].copy_from_slice(&500u16.to_ne_bytes());
        let mut it = Events::new(&bad);
        assert!(it.next().is_none() && it.malformed);
    }
}
