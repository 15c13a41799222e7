//! The data a configuration holds when its server is replaced: a tree of
//! `files` files spread over `dirs` directories, `tree/d<D>/f<I>`, each of
//! `bytes` bytes (memfs: what the successor must take over; passthrough:
//! empty files on the source that the kernel then looks up, so the
//! successor must re-create a node for each).

use std::path::{Path, PathBuf};

/// The shape of a configuration's tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tree {
    pub files: usize,
    pub dirs: usize,
    /// Bytes per file.
    pub bytes: usize,
}

impl Tree {
    fn per_dir(&self) -> usize {
        self.files.div_ceil(self.dirs.max(1)).max(1)
    }

    /// The path of file `i` below `root`.
    pub fn file(&self, root: &Path, i: usize) -> PathBuf {
        root.join("tree")
            .join(format!("d{}", i / self.per_dir()))
            .join(format!("f{i}"))
    }

    /// Directories in use (the last may be partly filled).
    pub fn dirs_used(&self) -> usize {
        self.files.div_ceil(self.per_dir())
    }

    /// Makes the tree below `root`, on `threads` threads (directory `d`
    /// by thread `d % threads`). File `i` holds `bytes` bytes of a
    /// pattern that starts with `i`, so no two files are alike.
    pub fn make(&self, root: &Path, threads: usize) -> std::io::Result<()> {
        let threads = threads.max(1);
        let per = self.per_dir();
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    s.spawn(move || -> std::io::Result<()> {
                        let mut buf = vec![0u8; self.bytes];
                        for d in (t..self.dirs_used()).step_by(threads) {
                            let first = self.file(root, d * per);
                            std::fs::create_dir_all(first.parent().expect("a file has a parent"))?;
                            for i in d * per..((d + 1) * per).min(self.files) {
                                fill(&mut buf, i);
                                std::fs::write(self.file(root, i), &buf)?;
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            hs.into_iter()
                .try_for_each(|h| h.join().expect("a tree-making thread panicked"))
        })
    }

    /// `n` files of the tree, spread evenly over it.
    pub fn sample(&self, root: &Path, n: usize) -> Vec<PathBuf> {
        if self.files == 0 {
            return Vec::new();
        }
        let n = n.min(self.files).max(1);
        let step = self.files / n;
        (0..n).map(|k| self.file(root, k * step)).collect()
    }
}

fn fill(buf: &mut [u8], i: usize) {
    let seed = (i as u64).to_le_bytes();
    for (k, b) in buf.iter_mut().enumerate() {
        *b = if k < 8 { seed[k] } else { (k * 13 + i) as u8 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_fill_directories_in_order() {
        let t = Tree {
            files: 10,
            dirs: 3,
            bytes: 0,
        };
        let r = Path::new("/m");
        assert_eq!(t.file(r, 0), Path::new("/m/tree/d0/f0"));
        assert_eq!(t.file(r, 3), Path::new("/m/tree/d0/f3"));
        assert_eq!(t.file(r, 4), Path::new("/m/tree/d1/f4"));
        assert_eq!(t.file(r, 9), Path::new("/m/tree/d2/f9"));
        assert_eq!(t.dirs_used(), 3);
        assert_eq!(t.sample(r, 2), vec![t.file(r, 0), t.file(r, 5)]);
        let none = Tree { files: 0, ..t };
        assert!(none.sample(r, 5).is_empty());
    }

    #[test]
    fn makes_every_file_with_its_own_content() {
        let d = std::env::temp_dir().join(format!("uvfs-restart-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let t = Tree {
            files: 25,
            dirs: 4,
            bytes: 100,
        };
        t.make(&d, 3).unwrap();
        let a = std::fs::read(t.file(&d, 3)).unwrap();
        let b = std::fs::read(t.file(&d, 24)).unwrap();
        assert_eq!((a.len(), b.len()), (100, 100));
        assert_ne!(a, b);
        let n: usize = std::fs::read_dir(d.join("tree"))
            .unwrap()
            .map(|e| std::fs::read_dir(e.unwrap().path()).unwrap().count())
            .sum();
        assert_eq!(n, 25);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
