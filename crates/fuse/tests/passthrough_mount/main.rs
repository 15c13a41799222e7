//! A passthrough mount used as a real file system: what its source holds
//! (POSIX ACLs, contents rewritten on the host) must show through the
//! mount as it does natively. Skipped where FUSE cannot be mounted.
//!
//! # Modules
//! `source.rs` holds what must show through as on the source (ACLs,
//! set-ids, tmpfiles, sparse files, files changed or removed on the host,
//! file handles), `locks.rs` locks shared with the source's other users,
//! `kernel_io.rs` files the kernel reads and writes on their source files
//! itself, `read_only.rs` a read-only mount, and `relist.rs` listings
//! that give names alone. The mount they share,
//! `Pt`, is here.

#[path = "../common/mod.rs"]
mod common;

mod kernel_io;
mod locks;
mod read_only;
mod relist;
mod source;

use common::fuse_usable;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vnode::{Config, VnodeLayer};

/// How long the kernel may trust attributes here.
pub(crate) const ATTR: Duration = Duration::from_millis(200);

pub(crate) struct Pt {
    pub(crate) base: PathBuf,
    pub(crate) mount: Option<BackgroundMount>,
    /// The file system served (for what only the server can do).
    pub(crate) fs: std::sync::Arc<PassthroughFs>,
}

impl Pt {
    pub(crate) fn new(tag: &str) -> Option<Pt> {
        Pt::with_timeouts(tag, ATTR)
    }

    /// With the kernel trusting entries and attributes for `attr`.
    pub(crate) fn with_timeouts(tag: &str, attr: Duration) -> Option<Pt> {
        Pt::build(tag, attr, false, |_| {})
    }

    /// Served read-only, as `uvfs mount --read-only` does, over a source
    /// that `fill` made first.
    pub(crate) fn read_only(tag: &str, fill: impl FnOnce(&Path)) -> Option<Pt> {
        Pt::build(tag, ATTR, true, fill)
    }

    fn build(tag: &str, attr: Duration, read_only: bool, fill: impl FnOnce(&Path)) -> Option<Pt> {
        if let Err(why) = fuse_usable() {
            eprintln!("SKIP: {why}");
            return None;
        }
        // Under /var/tmp: a disk file system with ACLs (the default
        // temp dir may be a tmpfs without them).
        let base = PathBuf::from(format!(
            "/var/tmp/uvfs-pt-mount-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("src")).unwrap();
        std::fs::create_dir_all(base.join("mnt")).unwrap();
        // Others must reach the tree (tests run commands as uid 1000).
        for p in [&base, &base.join("src"), &base.join("mnt")] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        fill(&base.join("src"));
        let layer = VnodeLayer::new(Config::with_limit(4096));
        let fs = PassthroughFs::new(
            layer.clone(),
            &base.join("src"),
            PassthroughConfig {
                no_atime: read_only,
                ..PassthroughConfig::default()
            },
        )
        .unwrap();
        let cfg = ServeConfig {
            mountpoint: base.join("mnt"),
            threads: 2,
            timeouts: Timeouts { entry: attr, attr },
            fsname: format!("uvfs-pt-{tag}"),
            control: false,
            server_opendir: false,
            uring: common::uring(),
            read_only,
            mount_flags: 0,
            // As `uvfs mount --source` serves. (It does not ask when
            // read-only; here the file system's refusal to offer backing
            // files is then what keeps the source's atimes.)
            kernel_io: true,
            dir_refresh: true,
            allow_other: false,
            successor: None,
            supervise: false,
        };
        let mount = BackgroundMount::start(fs.clone(), layer, &cfg).expect("mount");
        Some(Pt {
            base,
            mount: Some(mount),
            fs,
        })
    }

    pub(crate) fn m(&self, rel: &str) -> PathBuf {
        self.base.join("mnt").join(rel)
    }

    pub(crate) fn src(&self, rel: &str) -> PathBuf {
        self.base.join("src").join(rel)
    }
}

impl Drop for Pt {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            if common::uring() && !std::thread::panicking() {
                common::assert_uring_served(&m.report(false));
            }
            let r = m.unmount();
            if !std::thread::panicking() {
                r.expect("unmount");
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// A counter of the running server's statistics.
pub(crate) fn counter(t: &Pt, name: &str) -> u64 {
    let r = t.mount.as_ref().expect("mounted").report(false);
    r["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name}: {r}"))
}
