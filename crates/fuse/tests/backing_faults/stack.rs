//! The stack under test: `FaultFs` mounted, a uvfs passthrough of it
//! mounted on top.

use crate::common::{self, fuse_usable};
use crate::cpath;
use crate::faultfs::{FaultFs, Switches};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use uvfs_fuse::{BackgroundMount, ServeConfig, Timeouts};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vnode::{Config, VnodeLayer};

/// A faulty backing mount and a uvfs passthrough of it; unmounted in
/// that order (top first) on drop.
pub(crate) struct Stack {
    pub(crate) top: Option<BackgroundMount>,
    faulty: Option<fuser::BackgroundSession>,
    pub(crate) sw: Arc<Switches>,
    base: PathBuf,
}

impl Stack {
    pub(crate) fn new(tag: &str, fd_budget: usize) -> Option<Stack> {
        if let Err(why) = fuse_usable() {
            eprintln!("SKIP: {why}");
            return None;
        }
        let base = std::env::temp_dir().join(format!("uvfs-faults-{tag}-{}", std::process::id()));
        let (src, mnt) = (base.join("faulty"), base.join("mnt"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&mnt).unwrap();

        let sw = Arc::new(Switches::default());
        let mut fcfg = fuser::Config::default();
        fcfg.mount_options = vec![fuser::MountOption::FSName("uvfs-faultfs".into())];
        // Two loops: one may wait in a held FSYNC while the other serves.
        fcfg.n_threads = Some(2);
        let faulty = fuser::Session::new(FaultFs { sw: sw.clone() }, &src, &fcfg)
            .expect("mount the faulty file system")
            .spawn()
            .expect("serve it");

        let layer = VnodeLayer::new(Config::with_limit(4096));
        let cfg = PassthroughConfig {
            fd_budget: Some(fd_budget),
            no_handles: false,
            no_dir_readahead: false,
            no_atime: false,
            watch: false,
            keep_timeouts: false,
            no_diratime: false,
        };
        let fs = PassthroughFs::new(layer.clone(), &src, cfg).expect("passthrough of FaultFs");
        let scfg = ServeConfig {
            mountpoint: mnt.clone(),
            threads: 2,
            // Nothing cached in the top mount either: every check below is
            // a request to the server.
            timeouts: Timeouts {
                entry: Duration::ZERO,
                attr: Duration::ZERO,
            },
            fsname: format!("uvfs-faults-{tag}"),
            control: false,
            server_opendir: false,
            uring: common::uring(),
            read_only: false,
            mount_flags: 0,
            // Reads and writes through the server: its failure paths
            // and offloading are what is tested here.
            kernel_io: false,
            dir_refresh: true,
            allow_other: false,
            successor: None,
            supervise: false,
        };
        let top = BackgroundMount::start(fs, layer, &scfg).expect("mount the passthrough");
        Some(Stack {
            top: Some(top),
            faulty: Some(faulty),
            sw,
            base,
        })
    }

    pub(crate) fn p(&self, rel: &str) -> PathBuf {
        self.base.join("mnt").join(rel)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(top) = self.top.take() {
            let r = top.unmount();
            if !std::thread::panicking() {
                r.expect("unmount the passthrough");
            }
        }
        // Unmounted here: fuser 0.18's own unmount on drop is guarded by
        // an inverted liveness test (crates/fuse/src/kmount.rs says more)
        // and left the mount behind. Detached, the kernel ends the session
        // and fuser's request loop with it.
        let faulty = cpath(&self.base.join("faulty"));
        // SAFETY: a NUL-terminated path.
        unsafe { libc::umount2(faulty.as_ptr(), libc::MNT_DETACH) };
        drop(self.faulty.take());
        let _ = std::fs::remove_dir(self.base.join("mnt"));
        let _ = std::fs::remove_dir(self.base.join("faulty"));
        let _ = std::fs::remove_dir(&self.base);
    }
}
