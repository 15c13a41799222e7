//! Changes a file system sees happen behind the kernel's back.
//!
//! A file system whose files others change too (a passthrough's source,
//! written on the host) may watch for those changes and report each one
//! here; the front end turns them into what makes its cache forget
//! exactly that (FUSE notifications). With every change reported, the
//! front end may let its cache keep names and attributes for long, so a
//! warm walk sends no request at all, and a change still shows at once.
//!
//! Reports name vnodes by inode number (`Vnode::ino`) and, but for
//! `ChangeSink::changed_through`, only those the front end holds
//! (`VnodeRef::ext_count` above zero): the kernel caches nothing about
//! others, so a watcher spends nothing on them.

use uvfs_vnode::Ino;

/// What a watcher reports to.
pub trait ChangeSink: Send + Sync {
    /// The name `name` in directory `dir` may now lead to another file or
    /// to none (created, removed, renamed away or onto). The directory's
    /// own attributes and listing changed with it.
    fn entry_changed(&self, dir: Ino, name: &[u8]);

    /// The attributes of `ino` changed (mode, owner, times, size, links,
    /// extended attributes); with `data`, its contents too.
    fn inode_changed(&self, ino: Ino, data: bool);

    /// `ino` (held by the front end or not) changed as `inode_changed`
    /// says, through a name in directory `dir`, which the front end
    /// holds. A reply about `dir` under way (a LOOKUP, a READDIRPLUS) may
    /// have read `ino` before the change and hand it to the kernel after
    /// the change was reported: where the kernel held no inode for it
    /// yet, that report found nothing to drop, and the reply's attributes
    /// would stand for the attribute timeout. A front end that repeats
    /// what replies could have raced (`batch_done`) repeats this inode's
    /// report too. The default ignores it.
    fn changed_through(&self, _dir: Ino, _ino: Ino, _data: bool) {}

    /// A file of `ino` open for writing was closed by another process:
    /// its last reference went (a `close`, or the end of the last mapping
    /// that outlived it). Reported besides `inode_changed`. A front end
    /// whose kernel writes backing files itself (`FileSystem::backing_file`)
    /// counts these against the backing files it let the kernel open, to
    /// know when no mapping of one is left; so a file system whose
    /// `cache_limit` of a file with a backing file is `None` must report
    /// every such close it is told of. The default ignores it.
    fn closed_for_writing(&self, _ino: Ino) {}

    /// A directory was made at, or moved to, `name` in directory `dir`
    /// (reported besides `entry_changed`). A front end whose kernel keeps
    /// working directories by name may look the name up again after its
    /// invalidation: the kernel moves (or hashes again) a directory's
    /// entry only when something looks the name up, and until then a
    /// process working in or below the directory finds `getcwd` failing
    /// or answering an old path. The default ignores it.
    fn dir_arrived(&self, _dir: Ino, _name: &[u8]) {}

    /// Changes were lost (the watcher's queue overflowed, or it stopped):
    /// nothing the front end caches may be trusted any more.
    fn everything_changed(&self);

    /// Called after each batch of reports, so a front end may repeat what
    /// a reply of its own could have raced (a name looked up just before
    /// the change, whose reply reaches the kernel's cache after the
    /// report did).
    fn batch_done(&self) {}
}

/// How a file system's watcher is doing (for statistics and logs).
#[derive(Clone, Debug, Default)]
pub struct WatchStatus {
    /// Watching now: reports come for every change.
    pub active: bool,
    /// Why not, when not (one line, for the log and `uvfs stat`).
    pub why_not: Option<String>,
    /// Events read.
    pub events: u64,
    /// Events about nodes the front end does not hold (cost nothing more).
    pub ignored: u64,
    /// Events made by this process itself (the front end already knows).
    pub own: u64,
    /// Reports made (`entry_changed` and `inode_changed`).
    pub invalidations: u64,
    /// Queue overflows (each reported as `everything_changed`).
    pub overflows: u64,
}
