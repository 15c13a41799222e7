//! INIT: the features asked of the kernel, each optional (a kernel
//! without one still works), and a log line of what it agreed to. Apart
//! from the handlers because every choice here is about the kernel, not
//! about a request.

use super::{Server, MAX_WRITE};
use fuser::{InitFlags, KernelConfig, Request};
use std::sync::atomic::Ordering;

impl Server {
    pub(super) fn init(
        &mut self,
        _req: &Request,
        config: &mut KernelConfig,
    ) -> std::io::Result<()> {
        // Each is optional: a kernel without one still works, just slower.
        //
        // Not FUSE_ATOMIC_O_TRUNC, although it saves a SETATTR per
        // `open(O_TRUNC)`: with it the kernel sends O_TRUNC inside OPEN and,
        // once OPEN succeeds, zeroes its i_size and drops the page cache,
        // all before `handle_truncate` checks for ETXTBSY. An
        // `open(O_RDONLY | O_TRUNC)` of a program being exec'd then pulls
        // the pages from under the exec (it dies with SIGSEGV), and if it
        // dies before that check the open succeeds, which pjdfstest's
        // open::etxtbsy catches now and then. Without the flag the
        // kernel checks write access first and truncates with SETATTR.
        // Files written outside the server: cached pages go when the
        // kernel sees mtime or size change (without it a file rewritten
        // on the host in place reads stale until the cache is dropped).
        if self.inner.fs.changes_outside() {
            let _ = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA);
        }
        // ACLs enforced by the kernel (with default_permissions it
        // otherwise checks mode bits only, and a user an ACL denies could
        // read the file).
        // With ACLs, the umask is the file system's to apply: a default
        // ACL on the directory replaces it (FUSE_DONT_MASK; Ctx::umask).
        if self.inner.fs.posix_acls() {
            let _ = config.add_capabilities(InitFlags::FUSE_POSIX_ACL);
            let _ = config.add_capabilities(InitFlags::FUSE_DONT_MASK);
        }
        // Set-uid/set-gid are dropped here (SetAttr::kill_suidgid, asked by
        // flags on WRITE, SETATTR, OPEN and CREATE). Without it the kernel
        // asks GETXATTR security.capability before every write (the
        // superblock lacks SB_NOSEC), one round trip per write.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // FUSE over io_uring, if asked: requests then reach a queue thread
        // on the caller's CPU (third_party/fuser/src/uring.rs).
        if self.inner.uring.load(Ordering::Relaxed)
            && config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok()
        {
            self.inner.uring_on.store(true, Ordering::Relaxed);
        }
        // File locks go to the file system when it keeps them (a
        // passthrough's land on the backing files); otherwise the kernel
        // keeps its own, local to this mount.
        if self.inner.fs.forwards_locks() {
            let _ = config.add_capabilities(InitFlags::FUSE_POSIX_LOCKS);
            let _ = config.add_capabilities(InitFlags::FUSE_FLOCK_LOCKS);
        }
        // Idmapped mounts (`mount_setattr(MOUNT_ATTR_IDMAP)` of this
        // mount, as containers make them; Linux 6.12+, and only with
        // default_permissions, which uvfs always mounts with). The kernel
        // then checks every caller through the mount's idmapping and sends
        // its mapped ids only with requests that make an inode; all others,
        // on every mount of the connection, idmapped or not, carry
        // `Ctx::UNKNOWN_ID` (`Ctx::ids_unknown`), and what the server did
        // with a caller's ids there (set-gid kept or dropped, the owner of
        // a whiteout, the owner check of inode flags) it does with the
        // caller's own (`Ctx::resolved`) or leaves to the kernel's check.
        if self.inner.idmap.load(Ordering::Relaxed)
            && config.add_capabilities(InitFlags::FUSE_ALLOW_IDMAP).is_ok()
        {
            self.inner.idmap_on.store(true, Ordering::Relaxed);
        }
        for cap in [
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_EXPORT_SUPPORT,
            InitFlags::FUSE_CACHE_SYMLINKS,
        ] {
            let _ = config.add_capabilities(cap);
        }
        // Reads, writes and mappings of files with a backing file done by
        // the kernel on it (`backing.rs`). Depth 1: the backing files may
        // not be on a stacked file system themselves (overlayfs, another
        // such FUSE mount), and this mount may still be stacked on once
        // (an overlayfs lower layer).
        if self.inner.backings.wanted.load(Ordering::Relaxed)
            && config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(1).is_ok()
        {
            self.inner.backings.on.store(true, Ordering::Relaxed);
        }
        // Directories opened by the kernel alone (FUSE_NO_OPENDIR_SUPPORT,
        // the default): a warm `find` then costs no OPENDIR + RELEASEDIR
        // round trip per directory (the kernel keeps the listing, with
        // FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE as its default for
        // no-opendir, the same flags `opendir` below answers); figures in
        // docs/design/fuse-server.md.
        if !self.inner.server_opendir
            && config
                .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
                .is_ok()
        {
            self.inner.no_opendir.store(true, Ordering::Relaxed);
        }
        let _ = config.set_max_write(MAX_WRITE);
        self.log_init(config);
        Ok(())
    }

    /// Says what the kernel agreed to at INIT, and why a feature asked for
    /// is off.
    fn log_init(&self, config: &KernelConfig) {
        let i = &self.inner;
        let on = |b: &std::sync::atomic::AtomicBool| {
            if b.load(Ordering::Relaxed) {
                "on"
            } else {
                "off"
            }
        };
        log::info!(
            "kernel FUSE protocol {}: io_uring {}, kernel I/O on source files {}, \
             directories opened by the kernel {}, idmapped mounts {}",
            config.kernel_abi(),
            on(&i.uring_on),
            on(&i.backings.on),
            on(&i.no_opendir),
            on(&i.idmap_on),
        );
        if i.uring.load(Ordering::Relaxed) && !i.uring_on.load(Ordering::Relaxed) {
            log::warn!("FUSE over io_uring off: the kernel did not offer it at INIT");
        }
        if i.backings.wanted.load(Ordering::Relaxed) && !i.backings.on.load(Ordering::Relaxed) {
            log::warn!(
                "kernel I/O on source files off: the kernel does not offer FUSE passthrough \
                 (Linux 6.9+); reads and writes go through the server"
            );
        }
    }
}
