//! The statistics a running server reports through its control socket.
//!
//! One JSON object: `counters` maps dotted names to values, `descriptions`
//! the same names to what they count, and `accounting` says whether every
//! vnode of the mount is explained by a kernel reference or an open file.
//! Each subsystem names its own counters (`report.rs`); this module asks
//! them in turn and adds the vnode layer's, the process's and the file
//! system's.
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

use crate::report::{Counted, Report};
use crate::server::Inner;
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use uvfs_vnode::Mount;

/// Builds the report; `check` purges the mount's name cache first.
pub fn report(inner: &Inner, mountpoint: &str, check: bool) -> Value {
    let mnt = inner.fs.mount().clone();
    if check {
        inner.layer.namecache().purge_mount(mnt.id());
    }
    let mut out = Report::default();
    for (n, v, d) in inner.layer.stats().pairs() {
        out.put(n, v, d);
    }
    let active = vnodes(&mnt, &mut out);
    let parts: [&dyn Counted; 11] = [
        &inner.lineage,
        &inner.nodes,
        &inner.handles,
        &inner.locks,
        &inner.evict,
        &inner.refresh,
        &inner.counters,
        &inner.write_stalls,
        &inner.offload,
        &inner.changes,
        &inner.backings,
    ];
    for part in parts {
        out.add(part);
    }
    crate::journal::report(inner.journal.get().map(|j| &**j), &mut out);
    crate::uring_offer::report(inner.uring_on.load(Ordering::Relaxed), &mut out);
    process(&mut out);
    for (n, v, d) in inner.fs.fs_stats() {
        out.put(n, v, d);
    }
    let mut counters = Map::new();
    let mut descr = Map::new();
    for c in out.counters() {
        counters.insert(c.name.to_string(), json!(c.value));
        descr.insert(c.name.to_string(), json!(c.description));
    }
    let nodes = inner.nodes.len() as u64;
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
            "open_handles": inner.handles.len() as u64,
            "ok": !check || active == nodes,
        },
    })
}

/// Puts the mount's vnode counts; returns how many are active.
fn vnodes(mnt: &Mount, out: &mut Report) -> u64 {
    let vnodes = mnt.vnode_count() as u64;
    let free = mnt.free_count() as u64;
    let active = vnodes.saturating_sub(free);
    out.put("mount.vnodes", vnodes, "Vnodes of this mount in existence");
    out.put(
        "mount.vnodes.free",
        free,
        "Vnodes of this mount that are free (recyclable)",
    );
    out.put(
        "mount.vnodes.active",
        active,
        "Vnodes of this mount held or in use",
    );
    active
}

/// Puts the server process's CPU time and memory.
fn process(out: &mut Report) {
    out.put(
        "process.cpu_us",
        process_cpu_us(),
        "CPU time (user + system) of the server process, microseconds",
    );
    out.put(
        "process.rss_bytes",
        process_rss_bytes(),
        "Resident memory of the server process, bytes (0: unknown)",
    );
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
