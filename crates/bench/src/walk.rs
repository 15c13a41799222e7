//! A tree of empty files on a real file system, and a `find`-like walker
//! over it.
//!
//! # Shape
//! The tree has one subtree `t<s>` per walker of the widest run, so T
//! walkers each take their own subtrees (`s % T == walker`) and every run
//! stats the same entries. In a subtree, files sit `per_dir` to a leaf
//! directory, and leaf directories hang `fanout` to a directory, as many
//! levels deep as needed: 100,000 files at 100 per leaf and fanout 32 are
//! `t0/d<0..31>/d<0..31>/f<0..99>`, 1,032 directories in all.
//!
//! # Walk
//! As GNU find does: read each directory, `fstatat(dirfd, name,
//! AT_SYMLINK_NOFOLLOW)` each entry, descend with `openat`. No paths are
//! resolved from the root, so the walk costs what a real `find` costs.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

/// The shape of the benchmark tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeShape {
    /// Files in all subtrees together.
    pub files: usize,
    /// Subtrees (one per walker of the widest run).
    pub subtrees: usize,
    /// Files per leaf directory.
    pub per_dir: usize,
    /// Subdirectories per inner directory.
    pub fanout: usize,
}

impl TreeShape {
    /// Files in subtree `s` (the remainder goes to the first subtrees).
    pub fn files_in(&self, s: usize) -> usize {
        self.files / self.subtrees + usize::from(s < self.files % self.subtrees)
    }

    /// Leaf directories of subtree `s` (at least one).
    pub fn leaves(&self, s: usize) -> usize {
        self.files_in(s).div_ceil(self.per_dir.max(1)).max(1)
    }

    /// Directory levels below `t<s>` (at least one).
    pub fn depth(&self, s: usize) -> usize {
        let (leaves, fanout) = (self.leaves(s), self.fanout.max(2));
        let mut d = 1;
        let mut cap = fanout;
        while cap < leaves {
            cap = cap.saturating_mul(fanout);
            d += 1;
        }
        d
    }

    /// `t<s>/d<a>/d<b>/...`: the path of leaf `leaf` of subtree `s`.
    pub fn leaf(&self, s: usize, leaf: usize) -> PathBuf {
        let depth = self.depth(s);
        let fanout = self.fanout.max(2);
        let mut digits = vec![0; depth];
        let mut x = leaf;
        for d in digits.iter_mut().rev() {
            *d = x % fanout;
            x /= fanout;
        }
        let mut p = PathBuf::from(format!("t{s}"));
        for d in digits {
            p.push(format!("d{d}"));
        }
        p
    }

    /// Every directory of subtree `s`, `t<s>` first, parents before their
    /// children (the order to create them in).
    pub fn dirs(&self, s: usize) -> Vec<PathBuf> {
        let mut out = vec![PathBuf::from(format!("t{s}"))];
        let mut prev: Option<PathBuf> = None;
        for leaf in 0..self.leaves(s) {
            let p = self.leaf(s, leaf);
            // Ancestors of `p` not shared with the previous leaf, outermost
            // first.
            let mut new: Vec<PathBuf> = p
                .ancestors()
                .take(self.depth(s))
                .filter(|a| prev.as_ref().is_none_or(|q| !q.starts_with(a)))
                .map(Path::to_path_buf)
                .collect();
            new.reverse();
            out.extend(new);
            prev = Some(p);
        }
        out
    }

    /// `(leaf directory, file indices)` of subtree `s`.
    pub fn files_of_leaf(&self, s: usize, leaf: usize) -> std::ops::Range<usize> {
        let n = self.files_in(s);
        let per = self.per_dir.max(1);
        (leaf * per).min(n)..((leaf + 1) * per).min(n)
    }

    /// Entries a walk of subtree `s` stats: its files and directories,
    /// `t<s>` itself excluded.
    pub fn entries_in(&self, s: usize) -> u64 {
        (self.files_in(s) + self.dirs(s).len() - 1) as u64
    }

    /// Entries a walk of every subtree stats.
    pub fn entries(&self) -> u64 {
        (0..self.subtrees).map(|s| self.entries_in(s)).sum()
    }

    /// The subtrees walker `w` of `threads` walks.
    pub fn subtrees_of(&self, w: usize, threads: usize) -> Vec<usize> {
        (0..self.subtrees).filter(|s| s % threads == w).collect()
    }
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
}

fn with_path(e: io::Error, what: &str, p: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", p.display()))
}

/// Creates an empty regular file: mknod(2), one request through FUSE
/// after the lookup, or create + close where mknod is refused.
fn make_file(p: &Path) -> io::Result<()> {
    let c = cstr(p)?;
    // SAFETY: `c` is a valid NUL-terminated path; mknod only reads it.
    if unsafe { libc::mknod(c.as_ptr(), libc::S_IFREG | 0o644, 0) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => {
            std::fs::File::create(p).map(drop)
        }
        _ => Err(e),
    }
}

/// Builds subtree `s` of `shape` under `root` (which must exist).
pub fn build_subtree(root: &Path, shape: &TreeShape, s: usize) -> io::Result<()> {
    for d in shape.dirs(s) {
        let p = root.join(d);
        std::fs::create_dir(&p).map_err(|e| with_path(e, "mkdir", &p))?;
    }
    for leaf in 0..shape.leaves(s) {
        let dir = root.join(shape.leaf(s, leaf));
        for f in shape.files_of_leaf(s, leaf) {
            let p = dir.join(format!("f{f}"));
            make_file(&p).map_err(|e| with_path(e, "mknod", &p))?;
        }
    }
    Ok(())
}

/// Builds the whole tree under `root`, one thread per subtree.
pub fn build(root: &Path, shape: &TreeShape) -> io::Result<()> {
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..shape.subtrees)
            .map(|s| sc.spawn(move || build_subtree(root, shape, s)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("builder panicked")))
            })
            .collect::<io::Result<Vec<()>>>()
            .map(drop)
    })
}

/// An open directory stream; closed (with its fd) on drop.
struct Dir(NonNull<libc::DIR>);

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: the stream came from fdopendir and is closed only here.
        unsafe { libc::closedir(self.0.as_ptr()) };
    }
}

/// Stats every entry below the directory `fd` (which this takes over),
/// counting them in `n` as it goes, so a failed walk still tells how far it
/// got.
fn walk_fd(fd: libc::c_int, n: &mut u64) -> io::Result<()> {
    // SAFETY: `fd` is an open directory descriptor that we own; on success
    // the stream owns it, on failure we still do.
    let Some(dir) = NonNull::new(unsafe { libc::fdopendir(fd) }).map(Dir) else {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `fd` is still ours to close.
        unsafe { libc::close(fd) };
        return Err(e);
    };
    // SAFETY: `dir` is a live stream.
    let dfd = unsafe { libc::dirfd(dir.0.as_ptr()) };
    loop {
        // SAFETY: errno is thread-local; readdir sets it only on error, so
        // it must be cleared to tell the end from a failure.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `dir` is a live stream used by this thread only.
        let ent = unsafe { libc::readdir64(dir.0.as_ptr()) };
        if ent.is_null() {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(0) | None => Ok(()),
                _ => Err(e),
            };
        }
        // SAFETY: a non-null readdir result points to a dirent whose
        // d_name is NUL-terminated; it stays valid until the next readdir
        // on `dir`, and we are done with `name` before then.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        // SAFETY: an all-zero stat64 is a valid value of this C struct.
        let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
        // SAFETY: `dfd` is open, `name` a valid C string, `st` writable.
        if unsafe { libc::fstatat64(dfd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
            return Err(io::Error::last_os_error());
        }
        std::hint::black_box(&st);
        *n += 1;
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            // SAFETY: as for fstatat; openat returns a new fd we own.
            let sub = unsafe { libc::openat(dfd, name.as_ptr(), flags) };
            if sub < 0 {
                return Err(io::Error::last_os_error());
            }
            walk_fd(sub, n)?;
        }
    }
}

/// Stats every entry below `path` (not `path` itself); returns how many.
pub fn walk(path: &Path) -> io::Result<u64> {
    let mut n = 0;
    walk_counting(path, &mut n).map(|()| n)
}

/// [`walk`], adding each entry statted to `n` as it goes: after an error
/// (EMFILE from a server out of fds, say) `n` tells how far the walk got.
pub fn walk_counting(path: &Path, n: &mut u64) -> io::Result<()> {
    let c = cstr(path)?;
    // SAFETY: `c` is a valid NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(with_path(io::Error::last_os_error(), "open", path));
    }
    walk_fd(fd, n).map_err(|e| with_path(e, "walk", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(files: usize, subtrees: usize) -> TreeShape {
        TreeShape {
            files,
            subtrees,
            per_dir: 100,
            fanout: 32,
        }
    }

    #[test]
    fn default_shape_is_two_levels() {
        let s = shape(200_000, 2);
        assert_eq!(s.files_in(0), 100_000);
        assert_eq!(s.leaves(0), 1000);
        assert_eq!(s.depth(0), 2);
        assert_eq!(s.leaf(0, 999), PathBuf::from("t0/d31/d7"));
        let dirs = s.dirs(1);
        assert_eq!(dirs.len(), 1 + 32 + 1000);
        assert_eq!(s.entries_in(1), 101_032);
        assert_eq!(s.entries(), 2 * 101_032);
    }

    #[test]
    fn dirs_come_parents_first_and_unique() {
        let s = TreeShape {
            files: 1000,
            subtrees: 3,
            per_dir: 7,
            fanout: 3,
        };
        for t in 0..3 {
            let dirs = s.dirs(t);
            let mut seen = std::collections::HashSet::new();
            for d in &dirs {
                if let Some(p) = d.parent().filter(|p| !p.as_os_str().is_empty()) {
                    assert!(seen.contains(p), "{d:?} before its parent");
                }
                assert!(seen.insert(d.clone()), "{d:?} twice");
            }
            for leaf in 0..s.leaves(t) {
                assert!(seen.contains(&s.leaf(t, leaf)));
            }
        }
        // Remainders go to the first subtrees; every file has a leaf.
        assert_eq!((0..3).map(|t| s.files_in(t)).sum::<usize>(), 1000);
        assert_eq!(s.files_in(0), 334);
        let placed: usize = (0..s.leaves(0)).map(|l| s.files_of_leaf(0, l).len()).sum();
        assert_eq!(placed, 334);
    }

    #[test]
    fn tiny_and_empty_shapes() {
        let s = shape(5, 2);
        assert_eq!(s.depth(0), 1);
        assert_eq!(s.dirs(0).len(), 2);
        assert_eq!(s.entries_in(0), 3 + 1);
        let e = shape(0, 1);
        assert_eq!(e.leaves(0), 1);
        assert_eq!(e.entries(), 1);
    }

    #[test]
    fn walkers_split_subtrees() {
        let s = shape(10, 4);
        assert_eq!(s.subtrees_of(0, 1), vec![0, 1, 2, 3]);
        assert_eq!(s.subtrees_of(1, 2), vec![1, 3]);
    }

    #[test]
    fn build_then_walk_counts_every_entry() {
        let root = std::env::temp_dir().join(format!("uvfs-walk-test-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let s = TreeShape {
            files: 500,
            subtrees: 2,
            per_dir: 10,
            fanout: 4,
        };
        build(&root, &s).unwrap();
        let n: u64 = (0..2)
            .map(|t| walk(&root.join(format!("t{t}"))).unwrap())
            .sum();
        // The counting walk counts what the plain one returns, and a walk
        // that fails counts only what it statted (here nothing).
        let mut seen = 0;
        let e = walk_counting(&root.join("t9"), &mut seen).unwrap_err();
        assert_eq!((e.kind(), seen), (io::ErrorKind::NotFound, 0));
        let mut seen = 0;
        walk_counting(&root.join("t1"), &mut seen).unwrap();
        assert_eq!(seen, s.entries_in(1));
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(n, s.entries());
    }
}
