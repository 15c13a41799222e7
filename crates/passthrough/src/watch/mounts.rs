//! File systems mounted and unmounted on the host inside the source.
//!
//! fanotify reports no mount events, and a mount changes what a name
//! leads to without changing the directory that holds it: the kernel
//! kept resolving a mountpoint's name to the directory under the mount
//! for as long as the entry was cached (a day on a watched mount). The
//! mount table tells instead: `/proc/self/mountinfo` polls readable with
//! `POLLPRI` after each change of this mount namespace, and the table
//! read again names the mountpoints that came or went. Each of those
//! under the source is reported as a changed name in its parent
//! directory, so the kernel looks it up again and finds what the host
//! sees there now.
//!
//! A mount over the source's root itself is not followed: the mount
//! serves the directory it opened at its start, as a process whose
//! working directory a mount covered goes on seeing what it covers.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use uvfs_vfs::mountinfo::{entries, MOUNTINFO};

/// The mountpoints under the source, as last read.
pub(super) struct MountTable {
    file: File,
    /// The source root's path in this mount namespace.
    source: PathBuf,
    /// Paths of mountpoints under the source, relative to it, with the
    /// mounts stacked there.
    under: HashMap<Vec<u8>, usize>,
    buf: Vec<u8>,
    /// The source cannot be reached on the host now.
    lost: bool,
}

impl MountTable {
    /// The table as it is now, for a source at `source` (its path as the
    /// kernel gives it: no trailing slash but for `/`). `None` where the
    /// table cannot be read (no /proc).
    pub(super) fn new(source: PathBuf) -> Option<MountTable> {
        let file = File::open(MOUNTINFO).ok()?;
        let mut t = MountTable {
            file,
            source,
            under: HashMap::new(),
            buf: Vec::new(),
            lost: false,
        };
        t.under = t.read()?;
        Some(t)
    }

    /// The source root's path.
    pub(super) fn source(&self) -> &Path {
        &self.source
    }

    /// The source root is at `path` now.
    pub(super) fn set_source(&mut self, path: PathBuf) {
        self.source = path;
    }

    /// The source cannot be reached on the host now; whether that is
    /// news.
    pub(super) fn lose_source(&mut self) -> bool {
        !std::mem::replace(&mut self.lost, true)
    }

    /// The file to poll (`POLLPRI` after a change).
    pub(super) fn file(&self) -> &File {
        &self.file
    }

    /// Reads the table again: the mountpoints under the source where a
    /// mount came (true) or went (false) since the last read, relative to
    /// the source. Empty if the table could not be read (the last one
    /// read is kept).
    pub(super) fn changed(&mut self) -> Vec<(Vec<u8>, bool)> {
        let Some(now) = self.read() else {
            return Vec::new();
        };
        let changed = diff(&self.under, &now);
        self.under = now;
        changed
    }

    fn read(&mut self) -> Option<HashMap<Vec<u8>, usize>> {
        self.buf.clear();
        self.file.seek(SeekFrom::Start(0)).ok()?;
        self.file.read_to_end(&mut self.buf).ok()?;
        let source = self.source.as_os_str().as_bytes();
        let mut under_source = HashMap::new();
        for m in entries(&self.buf) {
            if let Some(rel) = under(source, m.mountpoint.as_os_str().as_bytes()) {
                *under_source.entry(rel.to_vec()).or_insert(0) += 1;
            }
        }
        Some(under_source)
    }
}

/// Where the mounts stacked on a mountpoint grew (true) or shrank
/// (false) from `was` to `now`.
fn diff(was: &HashMap<Vec<u8>, usize>, now: &HashMap<Vec<u8>, usize>) -> Vec<(Vec<u8>, bool)> {
    let count = |m: &HashMap<Vec<u8>, usize>, p: &Vec<u8>| m.get(p).copied().unwrap_or(0);
    was.keys()
        .chain(now.keys().filter(|p| !was.contains_key(*p)))
        .filter(|p| count(was, p) != count(now, p))
        .map(|p| (p.clone(), count(now, p) > count(was, p)))
        .collect()
}

/// `path` relative to `source` if it lies strictly under it.
fn under<'a>(source: &[u8], path: &'a [u8]) -> Option<&'a [u8]> {
    let rest = if source == b"/" {
        path.strip_prefix(b"/")?
    } else {
        path.strip_prefix(source)?.strip_prefix(b"/")?
    };
    (!rest.is_empty()).then_some(rest)
}

/// A relative mountpoint split into its parent (relative to the source,
/// `.` for the source itself) and its name.
pub(super) fn parent_and_name(rel: &[u8]) -> (PathBuf, &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (
            Path::new(std::ffi::OsStr::from_bytes(&rel[..i])).to_path_buf(),
            &rel[i + 1..],
        ),
        None => (PathBuf::from("."), rel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_paths_strictly_under_the_source_count() {
        assert_eq!(under(b"/srv/src", b"/srv/src/a/b"), Some(&b"a/b"[..]));
        assert_eq!(under(b"/srv/src", b"/srv/src"), None);
        assert_eq!(under(b"/srv/src", b"/srv/srcx/a"), None);
        assert_eq!(under(b"/srv/src", b"/srv"), None);
        assert_eq!(under(b"/", b"/proc"), Some(&b"proc"[..]));
        assert_eq!(under(b"/", b"/"), None);
    }

    #[test]
    fn mounts_that_came_went_or_stacked_are_changes() {
        let table = |v: &[(&str, usize)]| -> HashMap<Vec<u8>, usize> {
            v.iter().map(|(p, n)| (p.as_bytes().to_vec(), *n)).collect()
        };
        let was = table(&[("a", 1), ("b", 1), ("c", 2)]);
        let now = table(&[("a", 1), ("c", 1), ("d", 1), ("b/e", 1)]);
        let mut d = diff(&was, &now);
        d.sort();
        let expect: Vec<(Vec<u8>, bool)> = vec![
            (b"b".to_vec(), false),
            (b"b/e".to_vec(), true),
            (b"c".to_vec(), false),
            (b"d".to_vec(), true),
        ];
        assert_eq!(d, expect);
        assert!(diff(&now, &now).is_empty());
    }

    #[test]
    fn a_mountpoint_splits_into_parent_and_name() {
        assert_eq!(parent_and_name(b"a/b/c"), (PathBuf::from("a/b"), &b"c"[..]));
        assert_eq!(parent_and_name(b"c"), (PathBuf::from("."), &b"c"[..]));
    }
}
