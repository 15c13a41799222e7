//! The statistics a running server reports through its control socket.
//!
//! One JSON object: `counters` maps dotted names to values, `descriptions`
//! the same names to what they count, and `accounting` says whether every
//! vnode of the mount is explained by a kernel reference or an open file.
//!
//! # Accounting
//! A vnode of the mount is active (not free) exactly while something
//! holds or uses it. At rest those are: the node table's one hold per
//! node the kernel remembers, the open handles' uses (all on nodes the
//! kernel remembers, since it keeps an open file looked up) and the name
//! cache's holds on directories with entries. The `check` request purges
//! the mount's name-cache entries first, so at rest
//! `active vnodes == kernel nodes` must hold; more means a leaked
//! reference, fewer a node whose vnode was lost.

use crate::server::Inner;
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;

/// Builds the report; `check` purges the mount's name cache first.
pub fn report(inner: &Inner, mountpoint: &str, check: bool) -> Value {
    let mnt = inner.fs.mount().clone();
    if check {
        inner.layer.namecache().purge_mount(mnt.id());
    }
    let mut counters = Map::new();
    let mut descr = Map::new();
    let mut put = |name: &str, v: u64, d: &str| {
        counters.insert(name.to_string(), json!(v));
        descr.insert(name.to_string(), json!(d));
    };
    for (n, v, d) in inner.layer.stats().pairs() {
        put(n, v, d);
    }
    let vnodes = mnt.vnode_count() as u64;
    let free = mnt.free_count() as u64;
    let active = vnodes.saturating_sub(free);
    put("mount.vnodes", vnodes, "Vnodes of this mount in existence");
    put(
        "mount.vnodes.free",
        free,
        "Vnodes of this mount that are free (recyclable)",
    );
    put(
        "mount.vnodes.active",
        active,
        "Vnodes of this mount held or in use",
    );
    let l = &inner.lineage;
    put(
        "server.generation",
        l.generation.load(Ordering::Relaxed),
        "Servers of this mount before this one (live upgrades: `uvfs upgrade`)",
    );
    put(
        "server.restarts",
        l.restarts.load(Ordering::Relaxed),
        "Times the mount's server was replaced without unmounting",
    );
    put(
        "server.last_pause_us",
        l.last_pause_us.load(Ordering::Relaxed),
        "How long requests waited at the last replacement, microseconds",
    );
    let nodes = inner.nodes.len() as u64;
    let handles = inner.handles.len() as u64;
    let nc = &inner.nodes.counters;
    put(
        "fuse.nodes",
        nodes,
        "Nodes the kernel holds lookup references on (root included)",
    );
    put(
        "fuse.nodes.lookups",
        inner.nodes.total_lookups(),
        "Sum of the kernel's lookup counts",
    );
    put(
        "fuse.nodes.remembered",
        nc.remembered.load(Ordering::Relaxed),
        "Lookup references handed to the kernel",
    );
    put(
        "fuse.nodes.forgotten",
        nc.forgotten.load(Ordering::Relaxed),
        "Lookup references the kernel gave back (FORGET; more than it held counts in forget_excess)",
    );
    put(
        "fuse.nodes.released",
        nc.released.load(Ordering::Relaxed),
        "Nodes dropped when their count reached zero",
    );
    put(
        "fuse.nodes.forget_excess",
        nc.forget_excess.load(Ordering::Relaxed),
        "FORGETs for unknown nodes or beyond the count",
    );
    put(
        "fuse.handles.open",
        handles,
        "Open file and directory handles",
    );
    put(
        "fuse.locks.waiting",
        inner.locks.parked() as u64,
        "Lock requests (SETLKW) waiting for a conflicting lock to go",
    );
    let ec = &inner.evict.counters;
    put(
        "fuse.evict.queued",
        ec.queued.load(Ordering::Relaxed),
        "Nodes queued as candidates for kernel-forget",
    );
    put(
        "fuse.evict.sent",
        ec.sent.load(Ordering::Relaxed),
        "Nodes the kernel was asked to forget (prune or entry invalidation)",
    );
    put(
        "fuse.evict.kept",
        ec.kept.load(Ordering::Relaxed),
        "Nodes asked for that the kernel kept because they were in use (requeued)",
    );
    put(
        "fuse.evict.prune",
        ec.prune.load(Ordering::Relaxed),
        "1: nodes are forgotten by FUSE_NOTIFY_PRUNE; 0: by entry invalidation of non-directories",
    );
    put(
        "fuse.evict.max_vnodes",
        ec.max_vnodes.load(Ordering::Relaxed),
        "Highest vnode count of the mount seen when handing a node to the kernel",
    );
    put(
        "fuse.evict.throttled",
        ec.throttled.load(Ordering::Relaxed),
        "Requests that waited for the evictor: the mount held more than 15/16 of its vnode limit",
    );
    put(
        "fuse.evict.passes",
        ec.passes.load(Ordering::Relaxed),
        "Evictor passes over the vnode high water mark",
    );
    let fc = &inner.refresh.counters;
    for (n, v, d) in [
        ("fuse.refresh.queued", &fc.queued, "Directory listings after which the directory's attributes are to be fetched again"),
        ("fuse.refresh.refreshed", &fc.refreshed, "Listed directories stat'ed again through a clone of the mount (their next stat needs no round trip)"),
        ("fuse.refresh.uncached", &fc.uncached, "Listed directories left alone: the kernel no longer cached a name on the way"),
        ("fuse.refresh.stale", &fc.stale, "Listed directories whose name led elsewhere or nowhere"),
        ("fuse.refresh.unknown", &fc.unknown, "Listed directories with no known name"),
        ("fuse.refresh.dropped", &fc.dropped, "Listings not queued: too many directories waiting"),
        ("fuse.refresh.clones", &fc.clones, "Private clones of the mount opened for refreshing (one per mount)"),
        ("fuse.refresh.unavailable", &fc.unavailable, "Batches dropped: no fd to spare, or the mount is gone"),
        ("fuse.refresh.waiting", &fc.waiting, "Listed directories queued and not yet dealt with"),
    ] {
        put(n, v.load(Ordering::Relaxed), d);
    }
    put(
        "fuse.refresh.untracked",
        inner.refresh.names.untracked(),
        "Directories handed to the kernel whose names were not kept (too many kept already)",
    );
    put(
        "fuse.refresh.names",
        inner.refresh.names.len() as u64,
        "Directories whose names the refresher keeps (those the kernel holds)",
    );
    let rc = &inner.counters;
    put(
        "fuse.requests",
        rc.requests.load(Ordering::Relaxed),
        "Requests handled (FORGET excluded)",
    );
    put(
        "fuse.requests.errors",
        rc.errors.load(Ordering::Relaxed),
        "Requests answered with an errno",
    );
    put(
        "fuse.requests.uring",
        rc.uring.load(Ordering::Relaxed),
        "Requests that came through an io_uring queue (--uring)",
    );
    put(
        "fuse.requests.offloaded",
        rc.offloaded.load(Ordering::Relaxed),
        "Requests from an io_uring queue answered from a pool thread: syncs, uncached reads and writes after a stalled one, which may wait for a disk, removals, truncations and last releases of large files, which may wait while the disk frees them, and requests that may wait for inode space",
    );
    put(
        "fuse.writes.stalled",
        inner.write_stalls.stalls.load(Ordering::Relaxed),
        "WRITEs that took 5 ms or more and slept meanwhile (dirty-page throttling, a slow disk; not preemption); for a second after one, WRITEs from io_uring queues are answered from pool threads",
    );
    put(
        "fuse.offload.threads",
        inner.offload.workers() as u64,
        "Offload threads running now (they leave after 5 s without work)",
    );
    put(
        "fuse.uring",
        u64::from(inner.uring_on.load(Ordering::Relaxed)),
        "1: the kernel agreed to FUSE over io_uring (requests may still use /dev/fuse until every CPU's queue is up)",
    );
    if let Some(offer) = crate::uring_offer::offered() {
        put(
            "fuse.uring.switch_off",
            u64::from(offer == crate::UringOffer::NeedsRoot),
            "1: this kernel offers FUSE over io_uring, which answers each request on the caller's CPU, but its switch is off and only root may turn it on: `echo Y | sudo tee /sys/module/fuse/parameters/enable_uring`, then mount again",
        );
        put(
            "fuse.uring.switched_on",
            u64::from(offer == crate::UringOffer::TurnedOn),
            "1: the switch for FUSE over io_uring was off and this mount turned it on (/sys/module/fuse/parameters/enable_uring)",
        );
    }
    let ch = &inner.changes;
    put(
        "fuse.changes.entries",
        ch.entries.load(Ordering::Relaxed),
        "Name invalidations sent for changes made behind the kernel's back (repeats included)",
    );
    put(
        "fuse.changes.inodes",
        ch.inodes.load(Ordering::Relaxed),
        "Inode invalidations (attributes, contents, directory listings) sent for such changes",
    );
    put(
        "fuse.changes.repeated",
        ch.repeated.load(Ordering::Relaxed),
        "Batches of name invalidations sent again because an entry reply may have raced them",
    );
    put(
        "fuse.changes.everything",
        ch.everything.load(Ordering::Relaxed),
        "Times every cached name and attribute was invalidated (changes were lost)",
    );
    put(
        "fuse.changes.failed",
        ch.failed.load(Ordering::Relaxed),
        "Invalidations the kernel refused (other than for names and inodes it no longer holds)",
    );
    let b = &inner.backings;
    let (open_nodes, kernel_nodes) = b.open_nodes();
    put(
        "fuse.kernel_io",
        u64::from(b.enabled()),
        "1: the kernel reads, writes and maps open files on their backing files itself (FUSE passthrough)",
    );
    put(
        "fuse.kernel_io.registered",
        b.registered.load(Ordering::Relaxed),
        "Backing files registered with the kernel (a file's first open)",
    );
    put(
        "fuse.kernel_io.opens",
        b.kernel_opens.load(Ordering::Relaxed),
        "Opens whose reads and writes the kernel does on the backing file",
    );
    put(
        "fuse.kernel_io.refused",
        b.refused.load(Ordering::Relaxed),
        "Backing files the kernel would not take (the file is served by the server until its last close)",
    );
    put(
        "fuse.kernel_io.open_files",
        kernel_nodes,
        "Files open now with a registered backing file",
    );
    put(
        "fuse.kernel_io.open_files_server",
        open_nodes - kernel_nodes,
        "Files open now whose I/O comes to the server although kernel I/O is on",
    );
    put(
        "fuse.requests.panics",
        rc.panics.load(Ordering::Relaxed),
        "Handlers that panicked (answered EIO)",
    );
    for (op, v) in rc.by_op.pairs() {
        put(
            &format!("fuse.requests.op.{op}"),
            v,
            "Requests handled with this opcode",
        );
    }
    put(
        "process.cpu_us",
        process_cpu_us(),
        "CPU time (user + system) of the server process, microseconds",
    );
    put(
        "process.rss_bytes",
        process_rss_bytes(),
        "Resident memory of the server process, bytes (0: unknown)",
    );
    for (n, v, d) in inner.fs.fs_stats() {
        put(n, v, d);
    }
    json!({
        "mountpoint": mountpoint,
        "fs_type": inner.fs.fs_type(),
        "pid": std::process::id(),
        "read_only": inner.read_only,
        "counters": counters,
        "descriptions": descr,
        "accounting": {
            "checked": check,
            "active_vnodes": active,
            "kernel_nodes": nodes,
            "open_handles": handles,
            "ok": !check || active == nodes,
        },
    })
}

/// User + system CPU time of this process in microseconds.
fn process_cpu_us() -> u64 {
    let Some(ru) = crate::rusage::rusage(libc::RUSAGE_SELF) else {
        return 0;
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

/// Resident set size of this process in bytes, from /proc/self/statm
/// (its second field, in pages); 0 where that cannot be read.
fn process_rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .unwrap_or(0);
    pages * rustix::param::page_size() as u64
}

/// The report as `name value  # description` lines for people.
pub fn human(v: &Value) -> String {
    let mut out = String::new();
    let s = |k: &str| v.get(k).map(|x| x.to_string()).unwrap_or_default();
    let ro = if v.get("read_only").and_then(Value::as_bool) == Some(true) {
        "  read-only"
    } else {
        ""
    };
    out.push_str(&format!(
        "mountpoint {}  fs {}  pid {}{ro}\n",
        s("mountpoint"),
        s("fs_type"),
        s("pid")
    ));
    let empty = Map::new();
    let counters = v
        .get("counters")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let descr = v
        .get("descriptions")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let width = counters.keys().map(String::len).max().unwrap_or(0);
    for (k, val) in counters {
        let d = descr.get(k).and_then(Value::as_str).unwrap_or("");
        out.push_str(&format!("{k:<width$} {:>14}  # {d}\n", val.to_string()));
    }
    if let Some(a) = v.get("accounting") {
        out.push_str(&format!("accounting {a}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_cpu_time_is_reported() {
        // Burn a little CPU so the clock has ticked.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(process_cpu_us() > 0);
    }

    #[test]
    fn resident_memory_follows_what_the_process_touches() {
        let before = process_rss_bytes();
        assert!(before > 0);
        // 64 MiB written page by page is resident until freed.
        let mut big = vec![0u8; 64 << 20];
        for i in (0..big.len()).step_by(4096) {
            big[i] = 1;
        }
        std::hint::black_box(&mut big);
        let during = process_rss_bytes();
        assert!(during >= before + (48 << 20), "{before} -> {during}");
    }
}
