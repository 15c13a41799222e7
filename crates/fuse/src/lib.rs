//! The uvfs FUSE server: serves any `uvfs_vfs::FileSystem` through the
//! kernel's FUSE interface, using fuser 0.18.
//!
//! # Walkthrough
//!
//! A file system written against [`uvfs_vfs::FileSystem`] knows nothing of
//! FUSE: it answers operations on vnodes. This crate is the front end that
//! puts it under a mountpoint. The kernel names files by node ids and
//! counts how many times it was told of each; the server keeps one vnode
//! hold per node the kernel remembers (so the vnode layer never recycles a
//! file the kernel may still ask about) and one use reference per open
//! file, turns each request into the matching operation, and turns its
//! [`Errno`](uvfs_vfs::Errno) into the kernel's answer. Everything else is
//! left to the vnode layer's limit: nodes the kernel forgets become free
//! vnodes, recycled when the layer needs room, and the server asks the
//! kernel to forget cold nodes so that the count stays under the limit
//! however many files the kernel has looked up.
//!
//! The entry points, from the simplest:
//!
//! * [`mount_and_serve`] builds a vnode layer, lets a closure build the
//!   file system on it, mounts it and serves until it is unmounted or the
//!   process gets SIGINT or SIGTERM: the one call a program serving its own
//!   file system needs.
//! * [`ServeConfig`] says how: the mountpoint, request threads, kernel
//!   cache lifetimes ([`Timeouts`]), read-only, mount flags, FUSE over
//!   io_uring ([`uring_available`]), kernel I/O on backing files. Start
//!   from [`ServeConfig::new`] and change what you need.
//! * [`serve`] is the same as `mount_and_serve` for a program that makes
//!   its own layer and detaches first ([`daemonize`], [`Readiness`],
//!   [`BlockedSignals`]), as the `uvfs` command does.
//! * [`BackgroundMount`] serves on background threads and unmounts when
//!   asked or dropped: for tests and programs that embed a mount.
//!   [`serve_fd`] serves a FUSE channel it is given, mounting nothing.
//! * [`query`] and [`format_stats`] read a running server's statistics
//!   through its control socket (`uvfs stat`).
//!
//! A read-only file system of one file, served until Ctrl-C or `umount`
//! (`cargo run -p uvfs-fuse --example hello -- MOUNTPOINT` runs the whole
//! of it):
//!
//! ```no_run
//! use std::sync::Arc;
//! use uvfs_fuse::{mount_and_serve, ServeConfig};
//! # use uvfs_vfs::{Attr, Ctx, DirEntry, DirSink, Errno, Fh, FileSystem, VfsResult};
//! # use uvfs_vfs::{Ino, Mount, VType, VnodeLayer, VnodeRef};
//! #
//! // `Hello` implements `uvfs_vfs::FileSystem`: the seven required methods,
//! // as in that crate's walkthrough.
//! struct Hello {
//!     layer: Arc<uvfs_vfs::VnodeLayer>,
//!     mnt: Arc<uvfs_vfs::Mount>,
//! }
//! # impl Hello {
//! #     fn vnode(&self, ino: Ino) -> VfsResult<VnodeRef> {
//! #         let kind = if ino == 1 { VType::Dir } else { VType::Reg };
//! #         Ok(self.layer.get(&self.mnt, ino, || Ok((kind, uvfs_vfs::no_data())))?)
//! #     }
//! # }
//! # impl FileSystem for Hello {
//! #     fn fs_type(&self) -> &'static str { "hello" }
//! #     fn mount(&self) -> &Arc<Mount> { &self.mnt }
//! #     fn root(&self) -> VfsResult<VnodeRef> { self.vnode(1) }
//! #     fn lookup(&self, _: &Ctx, dir: &VnodeRef, name: &[u8]) -> VfsResult<VnodeRef> {
//! #         match name {
//! #             b"." | b".." => self.vnode(dir.ino()),
//! #             b"hello" => self.vnode(2),
//! #             _ => Err(Errno::ENOENT),
//! #         }
//! #     }
//! #     fn getattr(&self, vp: &VnodeRef) -> VfsResult<Attr> {
//! #         Ok(match vp.ino() {
//! #             1 => Attr::new(1, VType::Dir, 0o555, 0),
//! #             ino => Attr::new(ino, VType::Reg, 0o444, 6),
//! #         })
//! #     }
//! #     fn read(&self, _: &VnodeRef, _: Fh, off: u64, size: u32) -> VfsResult<Vec<u8>> {
//! #         let text = b"hello\n";
//! #         let start = (off as usize).min(text.len());
//! #         Ok(text[start..(start + size as usize).min(text.len())].to_vec())
//! #     }
//! #     fn readdir(&self, _: &VnodeRef, _: Fh, off: u64, sink: &mut DirSink<'_>) -> VfsResult<()> {
//! #         let all = [(1, VType::Dir, "."), (1, VType::Dir, ".."), (2, VType::Reg, "hello")];
//! #         for (i, (ino, kind, name)) in all.into_iter().enumerate().skip(off as usize) {
//! #             if sink(&DirEntry::new(ino, kind, name.as_bytes(), i as u64 + 1)) {
//! #                 break;
//! #             }
//! #         }
//! #         Ok(())
//! #     }
//! # }
//!
//! fn main() -> std::io::Result<()> {
//!     let cfg = ServeConfig::new("/mnt/hello");
//!     // At most 1024 vnodes cached; the closure builds the file system on
//!     // the layer that `mount_and_serve` made for it.
//!     mount_and_serve(&cfg, 1024, |layer| {
//!         let mnt = layer.mount("hello", Arc::new(()));
//!         Ok(Arc::new(Hello { layer: layer.clone(), mnt }))
//!     })
//! }
//! ```
//!
//! # Module map
//! Serving requests:
//! - `server/`: the fuser `Filesystem` implementation (request -> VOP ->
//!   reply), one module per request area, with the state every request
//!   loop shares (`server/state.rs`) and the request counters
//!   (`server/counters.rs`); `server/ioctl.rs` and `server/fileattr.rs`
//!   the ioctls served (inode flags, `FITRIM`).
//! - `nodes.rs`: node id -> (vnode hold, kernel lookup count): the one
//!   place where FUSE's LOOKUP/FORGET protocol becomes vnode holds.
//! - `handles.rs`: open files as vnode use references; `backing.rs` the
//!   backing files the kernel reads and writes itself.
//! - `convert.rs`: uvfs-vfs types to fuser's; `answered.rs`: which error
//!   answers are logged; `caller_caps.rs`: the caller's capabilities for
//!   the checks the kernel leaves to us; `caller_signal.rs` whether a
//!   waiting caller has a signal (an INTERRUPT the kernel lost).
//! - `lockwait.rs` and `offload.rs`: requests answered off the request
//!   loops (lock waits; requests that wait for a disk), `write_stall.rs`
//!   when WRITEs go there too, `threads.rs` what those threads must not
//!   inherit.
//!
//! Keeping the kernel's caches bounded and true:
//! - `evict.rs`: asking the kernel to forget cold nodes over the vnode
//!   limit (`prune.rs`: `FUSE_NOTIFY_PRUNE`).
//! - `changes.rs`: host changes a file system reports, turned into the
//!   notifications that make the kernel forget exactly those;
//!   `entry_race.rs` tells when a LOOKUP reply may have raced them
//!   (public only under `--cfg loom`, for its model test).
//! - `refresh.rs`: listed directories' attributes fetched again in the
//!   background, so a `stat` after a listing needs no round trip.
//! - `release.rs`: freed memory given back to the system.
//! - `sync.rs`: std or loom atomics for the lock-free pieces.
//!
//! Mounting and running:
//! - `mount.rs`: mounting with several request loops (`n_threads`,
//!   `clone_fd`) or serving a given channel (`serve_fd`); `kmount.rs`
//!   mount(2), its flags, and unmounting only our own mount;
//!   `fusermount.rs` the same through fusermount3 for users without the
//!   privilege; `mountinfo.rs` the device the kernel gave a mount.
//! - `uring_offer.rs`: whether a mount gets FUSE over io_uring; `caps.rs`
//!   whether we hold CAP_SYS_ADMIN.
//! - `signals.rs`: clean unmount on SIGINT/SIGTERM/SIGHUP; `daemon.rs`
//!   detaching.
//! - `control.rs` and `stats.rs`: the control socket behind `uvfs stat`
//!   and the report it serves, in the runtime directory of `rundir.rs`;
//!   `report.rs` the counters each subsystem puts in it (its `Counted`
//!   implementation sits next to the state it counts); `rusage.rs` the
//!   process's and threads' resource usage they report; `copies.rs`
//!   where a file system unmounted here is still mounted (`uvfs umount`).
//!
//! Restart without unmounting:
//! - `upgrade/`: live upgrade, a server handing its mount, its state and
//!   its connection to a successor process; `lineage.rs` a server's place
//!   in the line of servers of its mount (generation, restarts);
//!   `count_changes.rs` the nodes whose counts changed while the node
//!   table was copied ahead of the hand-over (public only under
//!   `--cfg loom`, for its model test).
//! - `supervise/`: crash recovery, the supervisor process that holds the
//!   connection and starts a new server when one dies; `journal/` what
//!   the kernel knows of the server's nodes and open files, kept in shared
//!   memory for that new server.

#![warn(missing_docs)]

mod answered;
mod backing;
mod caller_caps;
mod caller_signal;
mod caps;
mod changes;
mod control;
mod convert;
mod copies;
#[cfg(not(loom))]
mod count_changes;
#[cfg(loom)]
pub mod count_changes;
mod daemon;
#[cfg(not(loom))]
mod entry_race;
#[cfg(loom)]
pub mod entry_race;
mod evict;
mod fusermount;
mod handles;
mod journal;
mod kmount;
mod lineage;
mod lockwait;
mod mount;
mod mountinfo;
mod nodes;
mod offload;
mod prune;
mod refresh;
mod release;
mod report;
mod rundir;
mod rusage;
mod server;
mod signals;
mod stats;
pub mod supervise;
mod sync;
mod threads;
pub mod upgrade;
mod uring_offer;
mod write_stall;

pub use caps::{has_cap_dac_read_search, has_cap_sys_admin};
pub use control::{
    answers, exited_within, fallback_log_path, normalize_mountpoint, notify_remounted, query,
    request_upgrade, server_process, socket_paths,
};
pub use copies::{copies_of, Copies};
pub use daemon::{daemonize, Readiness};
pub use fusermount::{allow_other_refused, user_allow_other};
pub use kmount::{unmount_path, MOUNT_FLAGS};
pub use mount::{
    mount_and_serve, refuse_if_served, serve, serve_fd, serve_successor, BackgroundMount,
    ServeConfig,
};
pub use mountinfo::{entries as mountinfo_entries, mount_entry, MountEntry};
pub use nodes::ROOT_ID;
pub use refresh::MIN_ATTR_TIMEOUT as MIN_REFRESH_ATTR_TIMEOUT;
pub use release::set_memory_release;
pub use server::{Server, Timeouts, MAX_WRITE};
pub use signals::BlockedSignals;
pub use stats::human as format_stats;
pub use uring_offer::{offer_uring, UringOffer, URING_PARAMETER};

/// Whether this kernel serves FUSE over io_uring (`ServeConfig::uring`):
/// Linux 6.14+ with the `fuse` module's `enable_uring` parameter on.
pub fn uring_available() -> bool {
    fuser::uring_enabled_in_kernel()
}
