//! The passthrough counters as `(name, value, description)`, for `uvfs
//! stat` (through `FileSystem::fs_stats`).

use crate::fs::PassthroughFs;
use std::sync::atomic::Ordering;

impl PassthroughFs {
    /// Every counter, in a fixed order.
    pub fn stats(&self) -> Vec<(&'static str, u64, &'static str)> {
        let p = &self.pool;
        let pc = &p.counters;
        let c = &self.counters;
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let w = self.watch_status();
        vec![
            (
                "passthrough.watch.active",
                u64::from(w.active),
                "1: host changes of the source are watched and reported to the kernel, which may then cache names and attributes for long",
            ),
            (
                "passthrough.watch.events",
                w.events,
                "Host-change events read (fanotify)",
            ),
            (
                "passthrough.watch.ignored",
                w.ignored,
                "Events about files the kernel does not hold (nothing to tell it)",
            ),
            (
                "passthrough.watch.own",
                w.own,
                "Events of this server's own changes (the kernel made them through the mount)",
            ),
            (
                "passthrough.watch.invalidations",
                w.invalidations,
                "Changes of files the kernel holds, reported to it",
            ),
            (
                "passthrough.watch.overflows",
                w.overflows,
                "Times events were lost (queue overflow): everything the kernel cached was invalidated",
            ),
            (
                "passthrough.fds.budget",
                p.budget() as u64,
                "Most backing fds open at once",
            ),
            (
                "passthrough.fds.used",
                p.used() as u64,
                "Backing fds open now (cached, borrowed, open files)",
            ),
            (
                "passthrough.fds.max_used",
                p.max_used() as u64,
                "Most backing fds ever open at once",
            ),
            (
                "passthrough.fds.open_files",
                p.open_files() as u64,
                "Open files and directories now",
            ),
            (
                "passthrough.fds.open_files_parked",
                self.opens.parked() as u64,
                "Open files holding no fd now (given back to make room, or taken over so; reopened when a request needs one)",
            ),
            (
                "passthrough.locks.owners",
                self.posix_locks.len() as u64,
                "Backing descriptions holding POSIX locks of a lock owner now",
            ),
            (
                "passthrough.fds.opened",
                ld(&pc.opened),
                "Backing fds opened",
            ),
            (
                "passthrough.fds.evictions",
                ld(&pc.evictions),
                "Idle cached fds given back to the budget",
            ),
            (
                "passthrough.fds.trimmed",
                ld(&pc.trimmed),
                "Idle cached fds given back because more than 64 were cached (of the evictions)",
            ),
            (
                "passthrough.fds.second_chances",
                ld(&pc.second_chances),
                "Cached fds spared once because recently used",
            ),
            (
                "passthrough.fds.exhausted",
                ld(&pc.exhausted),
                "Requests refused with EMFILE (nothing evictable)",
            ),
            (
                "passthrough.fds.opens_refused",
                ld(&pc.opens_refused),
                "Opens made when open files held all the fd budget but what lookups need: each shared an open of the file with the same flags, took the fd an idle open file gave back, or was refused with EMFILE",
            ),
            (
                "passthrough.fds.opens_parked",
                ld(&pc.parked),
                "Idle open files that gave their fd back to make room for another open (reopened when next needed; the kernel keeps doing their I/O meanwhile)",
            ),
            (
                "passthrough.fds.opens_unparked",
                ld(&pc.unparked),
                "Parked open files whose fd was opened again for a request",
            ),
            (
                "passthrough.fds.opens_shared",
                ld(&pc.opens_shared),
                "Opens past the open files' share that took the description of an open of the file with the same flags",
            ),
            (
                "passthrough.fds.unlinked",
                ld(&c.unlinked),
                "Cached fds given back because their file lost its last name",
            ),
            (
                "passthrough.closes.deferred",
                ld(&c.closes_deferred),
                "Removed files holding storage whose last close came after the reply (closer.rs)",
            ),
            (
                "passthrough.lookups.own_mount",
                ld(&c.own_mount),
                "Lookups refused (ELOOP): the name led into this mount itself",
            ),
            (
                "passthrough.reopen.handle",
                ld(&c.reopen_handle),
                "Node fds reopened by file handle",
            ),
            (
                "passthrough.reopen.fallback",
                ld(&c.reopen_fallback),
                "Node fds reopened by parent and name",
            ),
            (
                "passthrough.stale",
                ld(&c.stale),
                "Files found removed or replaced behind the server's back",
            ),
            (
                "passthrough.source_removed",
                ld(&c.source_removed),
                "Attribute requests that found the source directory removed on the host",
            ),
            (
                "passthrough.rebinds",
                ld(&c.rebinds),
                "Nodes rebound to a new file reusing their inode number",
            ),
            (
                "passthrough.aliases",
                ld(&c.aliases),
                "New files given an alias id (the kernel still held their inode number's old file)",
            ),
            (
                "passthrough.inodes.aliases",
                self.inodes.alias_count() as u64,
                "Alias ids in use",
            ),
            (
                "passthrough.lookups",
                ld(&c.lookups),
                "Lookups that reached the backing file system",
            ),
            (
                "passthrough.lookups.revalidated",
                ld(&c.revalidated),
                "Lookups of a cached node's file answered from one statx (no handle, no open)",
            ),
            (
                "passthrough.handles.found_again",
                ld(&c.vget_reopened),
                "Nodes the kernel asked for by a file handle after they were recycled, reopened by the handle they had",
            ),
            (
                "passthrough.handles.remembered",
                self.remembered.len() as u64,
                "Handles of recycled nodes kept for file handles of the mount (bounded)",
            ),
            (
                "passthrough.stat_by_handle",
                ld(&c.stat_by_handle),
                "Attributes read through a handle opened for that call only (node with no cached fd)",
            ),
            (
                "passthrough.open_by_handle",
                ld(&c.open_by_handle),
                "Files opened straight by handle (node with no cached fd)",
            ),
            (
                "passthrough.handles.outside_source",
                ld(&c.outside_source),
                "Node ids that named, by inode number, a file outside the source (answered ESTALE)",
            ),
            (
                "passthrough.handles",
                u64::from(self.uses_handles()),
                "1 if nodes reopen by file handle",
            ),
            (
                "passthrough.inodes.foreign",
                self.inodes.foreign_count() as u64,
                "Files of other devices numbered",
            ),
            (
                "passthrough.readahead.dirs",
                self.prefetch.as_ref().map_or(0, |p| ld(&p.counters().dirs)),
                "Directories read ahead of a lone walker (their entries looked up)",
            ),
            (
                "passthrough.readahead.entries",
                self.prefetch
                    .as_ref()
                    .map_or(0, |p| ld(&p.counters().entries)),
                "Entries looked up ahead of a lone walker",
            ),
            (
                "passthrough.readahead.overtaken",
                self.prefetch
                    .as_ref()
                    .map_or(0, |p| ld(&p.counters().overtaken)),
                "Readaheads stopped because the walker got there first",
            ),
            (
                "passthrough.open.handles",
                self.opens.len() as u64,
                "Open file handles",
            ),
        ]
    }
}
