//! The server with the test as its kernel: FUSE requests written raw to a
//! socket that the server serves (`serve_fd`), most of them ones a kernel
//! never sends: unknown node ids and handles, bad names, extreme offsets
//! and sizes, excess FORGETs, truncated bodies, opcodes the server lacks.
//!
//! Every request must get exactly one reply, within 5 s, carrying its
//! `unique` and either an errno (-4095..=-1) or an answer of the right
//! shape (FORGET and BATCH_FORGET get none); no handler may panic
//! (`fuse.requests.panics`); and the server's node table must agree, after
//! every request, with the lookup counts a kernel would hold from the
//! replies it got (`fuse.nodes`, `fuse.nodes.lookups`), and its handle
//! table with the handles opened and not released. A seeded random phase
//! follows the targeted one (`UVFS_FUZZ_SEED`, `UVFS_FUZZ_OPS`).
//!
//! No mount and no privilege needed: the server end is one end of a
//! `SOCK_SEQPACKET` socket pair, which keeps message boundaries as
//! `/dev/fuse` does.
//!
//! # Modules
//! `wire.rs` encodes requests, `socket.rs` is the channel, `kernel.rs`
//! plays the kernel and `shape.rs` checks its replies; the targeted
//! cases are `nodes.rs`, `io.rs`, `odd.rs`, `locks.rs` and `ioctls.rs`,
//! the random phase `random.rs`. The tests themselves stay here, so
//! their names are the binary's top level.

mod io;
mod ioctls;
mod kernel;
mod locks;
mod nodes;
mod odd;
mod random;
mod resent;
mod shape;
mod socket;
mod wire;

use io::io;
use ioctls::inode_flags;
use kernel::Kernel;
use locks::locks;
use nodes::{forgets, names, unknown_nodes};
use odd::{odd_requests, sane};
use random::{env_u64, random_phase};
use socket::set_recv_timeout;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uvfs_memfs::{MemFs, MemFsConfig};
use uvfs_passthrough::{PassthroughConfig, PassthroughFs};
use uvfs_vfs::FileSystem;
use uvfs_vnode::{Config, VnodeLayer};
use wire::{
    getattr_in, release_in, setxattr_in, write_in, SetAttrIn, FATTR_MTIME, GETATTR, HEADER,
    RELEASE, ROOT, SETATTR, SETXATTR, WRITE,
};

// ---------------------------------------------------------------------------
// File systems.

fn memfs() -> (Arc<dyn FileSystem>, Arc<VnodeLayer>) {
    let layer = VnodeLayer::new(Config::with_limit(1 << 16));
    let fs = MemFs::new(
        layer.clone(),
        MemFsConfig {
            // Bounded: a FALLOCATE of a terabyte must fail, not allocate.
            size_limit: Some(256 << 20),
            ..Default::default()
        },
    );
    (fs, layer)
}

/// A passthrough over a fresh directory, removed on drop.
struct TempSource(PathBuf);

impl Drop for TempSource {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn passthrough(tag: &str) -> (Arc<dyn FileSystem>, Arc<VnodeLayer>, TempSource) {
    let dir = std::env::temp_dir().join(format!("uvfs-raw-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let layer = VnodeLayer::new(Config::with_limit(1 << 16));
    let fs = PassthroughFs::new(layer.clone(), &dir, PassthroughConfig::default()).unwrap();
    (fs, layer, TempSource(dir))
}

pub(crate) fn targeted(k: &mut Kernel, memfs: bool) {
    k.tag = "targeted: ".into();
    unknown_nodes(k);
    k.settle();
    forgets(k);
    names(k);
    k.settle();
    io(k, memfs);
    k.settle();
    if !memfs {
        locks(k);
        k.settle();
    }
    odd_requests(k);
    k.settle();
    inode_flags(k, memfs);
    k.settle();
    sane(k, b"sane");
}

#[test]
fn memfs_survives_hostile_requests() {
    let (fs, layer) = memfs();
    let mut k = Kernel::start(fs, layer, false);
    let t = Instant::now();
    targeted(&mut k, true);
    eprintln!("{} requests in {:?}", k.sent, t.elapsed());
    k.finish();
}

#[test]
fn passthrough_survives_hostile_requests() {
    let (fs, layer, _src) = passthrough("targeted");
    let mut k = Kernel::start(fs, layer, true);
    k.held_may_vanish = true;
    targeted(&mut k, false);
    k.finish();
}

#[test]
fn memfs_survives_random_requests() {
    let seed = env_u64("UVFS_FUZZ_SEED", 0x5eed_f00d);
    let ops = env_u64("UVFS_FUZZ_OPS", 3000);
    eprintln!("UVFS_FUZZ_SEED={seed:#x} UVFS_FUZZ_OPS={ops}");
    let (fs, layer) = memfs();
    let mut k = Kernel::start(fs, layer, false);
    let t = Instant::now();
    random_phase(&mut k, seed, ops, false);
    eprintln!("{} requests in {:?}", k.sent, t.elapsed());
    k.finish();
}

#[test]
fn passthrough_survives_random_requests() {
    let seed = env_u64("UVFS_FUZZ_SEED", 0x5eed_f00d) ^ 0x9e37_79b9;
    let ops = env_u64("UVFS_FUZZ_OPS", 3000) / 2;
    let (fs, layer, _src) = passthrough("random");
    let mut k = Kernel::start(fs, layer, true);
    k.held_may_vanish = true;
    random_phase(&mut k, seed, ops, true);
    k.finish();
}

// ---------------------------------------------------------------------------
// fuser's own parsing.

/// Requests the release of fuser 0.18 could not take: it panicked parsing
/// them (in its request loop, before any handler runs, so the server's
/// `catch_unwind` never saw it), and the file system was gone. Each case
/// runs on a fresh server; all must survive with the patched copy in
/// third_party/fuser (PATCHED.md).
///
/// A kernel sends none of them but the times: utimensat(2) takes any
/// `tv_sec` and FUSE passes it on, and the release's
/// `system_time_from_time` negated it unchecked (a panic for `i64::MIN` in
/// debug builds) and then subtracted a `Duration` that overflowed
/// (`(i64::MIN, 1)` panicked in release builds too), which stopped the
/// request loop. (Linux 6.18's VFS clamps a utimensat time to
/// -(2^63 - 1) s before FUSE sees it; the patch does not rely on that.)
///
/// A frame whose header cannot be read (a length below the header's or
/// beyond the message, an empty message) ends the session by fuser's
/// design: it has no request id to answer, and only a broken kernel sends
/// one. Those cases must end it without a panic.
static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn fuser_survives_malformed_requests() {
    // Panics anywhere in the process (fuser's request loops included).
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        prev(info);
    }));
    type Case = (&'static str, fn(&mut Kernel) -> (u32, u64, u32, Vec<u8>));
    fn times(sec: i64, nsec: u32) -> Vec<u8> {
        SetAttrIn {
            valid: FATTR_MTIME,
            mtime: (sec, nsec),
            ..Default::default()
        }
        .body()
    }
    let cases: [Case; 9] = [
        ("SETATTR mtime (i64::MAX, 1e9)", |_| {
            let b = times(i64::MAX, 1_000_000_000);
            (SETATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("SETATTR mtime (i64::MIN, 0)", |_| {
            let b = times(i64::MIN, 0);
            (SETATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("SETATTR mtime (i64::MIN, 1)", |_| {
            let b = times(i64::MIN, 1);
            (SETATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("SETATTR mtime (-i64::MAX, 1e9)", |_| {
            let b = times(-i64::MAX, 1_000_000_000);
            (SETATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("WRITE whose size field exceeds its data", |k| {
            let (f, fh) = k.create(ROOT, b"w");
            let mut b = write_in(fh, 0, b"abc");
            b[16..20].copy_from_slice(&100u32.to_le_bytes());
            (WRITE, f, (HEADER + b.len()) as u32, b)
        }),
        ("SETXATTR whose size field exceeds its value", |_| {
            let mut b = setxattr_in(0, b"user.a", b"abc");
            b[0..4].copy_from_slice(&100u32.to_le_bytes());
            (SETXATTR, ROOT, (HEADER + b.len()) as u32, b)
        }),
        ("header len 8, shorter than the header", |_| {
            (GETATTR, ROOT, 8, getattr_in(None))
        }),
        ("header len larger than the message", |_| {
            let b = getattr_in(None);
            (GETATTR, ROOT, (HEADER + b.len() + 100) as u32, b)
        }),
        ("an empty message", |_| (0, 0, 0, Vec::new())),
    ];
    let mut dead = Vec::new();
    for (what, make) in cases {
        let (fs, layer) = memfs();
        let mut k = Kernel::start(fs, layer, false);
        // A dead loop leaves the socket open (the evictor's notifier holds
        // it), so death shows as silence.
        set_recv_timeout(&k.fd, Duration::from_secs(1));
        let (op, nodeid, len, body) = make(&mut k);
        let unique = k.next_unique();
        let msg = if len == 0 && body.is_empty() {
            Vec::new()
        } else {
            k.message(op, unique, nodeid, len, &body)
        };
        k.send_raw(&msg);
        // Alive if a GETATTR after it is answered (the reply to the bad
        // request, if any, comes first).
        let probe = k.send(GETATTR, ROOT, &getattr_in(None));
        let mut alive = false;
        while let Some((u, ..)) = k.recv_any_quiet() {
            if u == probe {
                alive = true;
                break;
            }
        }
        eprintln!("{}: {what}", if alive { "survived" } else { "ended" });
        let framing = what.starts_with("header len") || what == "an empty message";
        if !alive && !framing {
            dead.push(what);
        }
        assert_eq!(
            PANICS.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{what}: a thread panicked"
        );
    }
    assert!(dead.is_empty(), "fuser's request loop died on: {dead:#?}");
}

/// `open_by_handle_at` after the kernel dropped a file's inode, while its
/// FORGET has not reached the server: the kernel asks LOOKUP of `.` in the
/// file's node id. The answer is the file itself, not ENOTDIR (which the
/// kernel turned into ESTALE).
#[test]
fn lookup_of_dot_in_a_held_file_answers_the_file() {
    let (fs, layer) = memfs();
    let mut k = Kernel::start(fs, layer, false);
    let (id, fh) = k.create(ROOT, b"f");
    let r = k.call(RELEASE, id, &release_in(fh));
    assert!(r.ok(), "RELEASE: {}", r.errno());
    let r = k.lookup(id, b".");
    assert!(r.ok(), "LOOKUP . in a file: {}", r.errno());
    assert_eq!(r.nodeid(), id);
    k.finish();
}
