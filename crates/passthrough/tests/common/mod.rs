//! Shared setup for the passthrough tests: a source directory under the
//! system temp dir, a vnode layer, a mount.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vfs::{Ctx, Fh, FileSystem, VnodeRef};
use uvfs_vnode::{Config, VnodeLayer};

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A fresh directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), tag)
    }

    /// A fresh directory under `base`.
    pub fn new_in(base: &Path, tag: &str) -> TempDir {
        let p = base.join(format!(
            "uvfs-pt-{tag}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Env {
    pub fs: Arc<PassthroughFs>,
    pub root: VnodeRef,
    pub src: TempDir,
    /// A sibling of the source: what escapes would reach.
    pub outside: TempDir,
}

pub fn env_with(tag: &str, vnodes: usize, cfg: PassthroughConfig) -> Env {
    env_of(TempDir::new(tag), tag, vnodes, cfg)
}

/// An `Env` serving `src` (made by the caller: a source on another file
/// system than the temp dir's).
pub fn env_of(src: TempDir, tag: &str, vnodes: usize, cfg: PassthroughConfig) -> Env {
    let outside = TempDir::new(&format!("{tag}-outside"));
    std::fs::write(outside.path().join("secret"), b"outside").unwrap();
    let layer = VnodeLayer::new(Config::with_limit(vnodes));
    let fs = PassthroughFs::new(layer, src.path(), cfg).unwrap();
    let root = fs.root().unwrap();
    Env {
        fs,
        root,
        src,
        outside,
    }
}

pub fn env(tag: &str) -> Env {
    env_with(tag, 4096, PassthroughConfig::default())
}

/// The default configuration with an fd budget of `budget`.
#[allow(dead_code)] // not every test file uses it
pub fn budgeted(budget: usize) -> PassthroughConfig {
    PassthroughConfig {
        fd_budget: Some(budget),
        ..PassthroughConfig::default()
    }
}

/// `e`'s file `name`, written with `data`, and opened `n` times with
/// `flags`.
#[allow(dead_code)] // not every test file uses it
pub fn opened_times(e: &Env, name: &str, data: &[u8], n: usize, flags: i32) -> (VnodeRef, Vec<Fh>) {
    std::fs::write(e.src.path().join(name), data).unwrap();
    let vp = e.lookup(&e.root, name).unwrap();
    let fhs = (0..n)
        .map(|_| e.fs.open(&ROOT, &vp, flags).unwrap())
        .collect();
    (vp, fhs)
}

pub const ROOT: Ctx = Ctx::ROOT;

impl Env {
    pub fn lookup(&self, dir: &VnodeRef, name: &str) -> uvfs_vfs::VfsResult<VnodeRef> {
        self.fs.lookup(&ROOT, dir, name.as_bytes())
    }

    /// Reads a whole (small) file through the VOPs.
    pub fn read_all(&self, vp: &VnodeRef) -> Vec<u8> {
        let fh = self.fs.open(&ROOT, vp, libc::O_RDONLY).unwrap();
        let d = self.fs.read(vp, fh, 0, 1 << 20).unwrap();
        self.fs.release(vp, fh).unwrap();
        d
    }

    pub fn names(&self, dir: &VnodeRef) -> Vec<String> {
        self.entries(dir).into_iter().map(|(n, _)| n).collect()
    }

    /// (name, inode number) of each entry of `dir`, sorted by name.
    pub fn entries(&self, dir: &VnodeRef) -> Vec<(String, u64)> {
        let fh = self.fs.opendir(&ROOT, dir, 0).unwrap();
        let mut v = Vec::new();
        self.fs
            .readdir(dir, fh, 0, &mut |e| {
                v.push((String::from_utf8_lossy(&e.name).into_owned(), e.ino));
                false
            })
            .unwrap();
        self.fs.releasedir(dir, fh).unwrap();
        v.sort();
        v
    }
}

/// Files under `dir` that an fd of this process still holds after their
/// removal (`/proc/self/fd` links ending in " (deleted)").
pub fn held_deleted(dir: &Path) -> Vec<String> {
    let prefix = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .filter(|t| t.starts_with(&prefix) && t.ends_with(" (deleted)"))
        .collect()
}

/// A tmpfs mounted for a test (a file system inside the source), lazily
/// unmounted on drop.
pub struct Tmpfs(std::ffi::CString);

impl Tmpfs {
    /// Mounts a fresh tmpfs on `at`; None where this process may not
    /// (not root), which the test reports as skipped.
    pub fn mount(at: &Path) -> Option<Tmpfs> {
        let target = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).ok()?;
        // SAFETY: NUL-terminated strings, a null data pointer (no options).
        let r = unsafe {
            libc::mount(
                c"uvfs-test".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        (r == 0).then_some(Tmpfs(target))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // SAFETY: NUL-terminated path of the tmpfs we mounted.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}
