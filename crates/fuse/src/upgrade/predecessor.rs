//! The handing side of a live upgrade: started from the control socket
//! (`upgrade` command), it starts the successor, parks the request loops,
//! saves and sends the state, and either leaves (the successor took
//! over) or serves on (it did not).

use super::state::{monotonic_ns, HandleState, MountState, NodeState, ServerState, VERSION};
use super::wire;
use crate::server::Inner;
use parking_lot::Mutex;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use uvfs_vfs::{Keep, VnodeRef};

/// How long the successor may take to start and say hello, and then to
/// take the state over.
const START_LIMIT: Duration = Duration::from_secs(30);
const TAKE_LIMIT: Duration = Duration::from_secs(120);
/// How long parking the request loops and draining the offload pool may
/// take: a request still being served past this (a hung disk) keeps the
/// server as it is.
const PARK_LIMIT: Duration = Duration::from_secs(10);

/// How this server starts a successor: set by the program that serves
/// (`ServeConfig::successor`).
#[derive(Clone, Debug)]
pub struct Successor {
    /// The binary `uvfs upgrade` starts when given none: the one this
    /// server was started from, at the path it was started by (so a
    /// binary rebuilt in place is the one started).
    pub exe: PathBuf,
    /// The program's own state for its successor (the CLI's options),
    /// handed over as it is.
    pub app: Vec<u8>,
}

/// Duplicates a server's link to its supervisor (and keeps the link).
pub(crate) type LinkDup = Box<dyn Fn() -> std::io::Result<OwnedFd> + Send + Sync>;

/// What a server needs to hand its mount over, set once it serves.
pub struct Upgradable {
    pub(crate) pauser: fuser::Pauser,
    pub(crate) negotiated: Vec<u8>,
    /// A descriptor of the connection, passed to the successor.
    pub(crate) dev: OwnedFd,
    pub(crate) mount: MountState,
    pub(crate) successor: Successor,
    /// Held while an upgrade is under way: one at a time.
    pub(crate) busy: Mutex<()>,
    /// This server's supervisor link, if it has one (`supervise/`), as a
    /// way to duplicate it: the successor is supervised by it too.
    pub(crate) link: std::sync::OnceLock<LinkDup>,
}

/// What an upgrade did.
#[derive(Debug, Clone)]
pub struct UpgradeReport {
    /// The successor's process id.
    pub pid: u32,
    /// Its generation.
    pub generation: u64,
    /// How long requests waited, microseconds.
    pub pause_us: u64,
    /// Nodes handed over.
    pub nodes: usize,
    /// Open handles handed over.
    pub handles: usize,
}

fn err(kind: std::io::ErrorKind, why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(kind, why.into())
}

/// Hands the mount served by `inner` to a successor started from `binary`
/// (default: `Successor::exe`). On success the request loops are released
/// and this server's `run` returns; on failure it serves on as before.
///
/// `answer` gets the outcome before this server lets go of the
/// connection (which ends its process soon after): the requester hears
/// back either way.
pub fn upgrade(
    inner: &Inner,
    ctx: Option<&Upgradable>,
    binary: Option<PathBuf>,
    answer: &mut dyn FnMut(&std::io::Result<UpgradeReport>),
) {
    let r = try_upgrade(inner, ctx, binary);
    answer(&r);
    if r.is_ok() {
        if let Some(ctx) = ctx {
            if let Err(e) = ctx.pauser.release() {
                log::error!("releasing the request loops after the hand-over: {e}");
            }
        }
    }
}

fn try_upgrade(
    inner: &Inner,
    ctx: Option<&Upgradable>,
    binary: Option<PathBuf>,
) -> std::io::Result<UpgradeReport> {
    let ctx = ctx.ok_or_else(|| {
        err(
            std::io::ErrorKind::Unsupported,
            "this server cannot hand its mount over (it was started without a way to \
             start a successor)",
        )
    })?;
    let Some(_one) = ctx.busy.try_lock() else {
        return Err(err(
            std::io::ErrorKind::WouldBlock,
            "an upgrade of this mount is already under way",
        ));
    };
    let exe = binary.unwrap_or_else(|| ctx.successor.exe.clone());
    let mut child = Started::spawn(&exe)?;
    inner.fs.successor_running(Some(child.pid()));
    let r = hand_over(inner, ctx, &mut child);
    match &r {
        Ok(rep) => {
            log::info!(
                "handed the mount over to {} (pid {}, generation {}): {} nodes, {} open \
                 handles, requests waited {} us",
                exe.display(),
                rep.pid,
                rep.generation,
                rep.nodes,
                rep.handles,
                rep.pause_us
            );
            child.leave();
        }
        Err(e) => {
            // Killed and reaped with `child` (its pid may be reused).
            drop(child);
            inner.fs.successor_running(None);
            log::warn!("upgrade to {} failed, serving on: {e}", exe.display())
        }
    }
    r
}

/// The successor process, killed and reaped unless it took over.
pub(crate) struct Started {
    child: Option<Child>,
    sock: UnixStream,
}

impl Started {
    pub(crate) fn spawn(exe: &std::path::Path) -> std::io::Result<Started> {
        if !exe.is_file() {
            return Err(err(
                std::io::ErrorKind::NotFound,
                format!("successor binary {}: no such file", exe.display()),
            ));
        }
        let (mine, theirs) = UnixStream::pair()?;
        // Inherited by the child (and only meant for it: other threads
        // forking meanwhile get a copy they never use).
        rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())?;
        let spawned = Command::new(exe)
            .env(super::state::VERSION_ENV, VERSION.to_string())
            .arg(super::TAKEOVER_ARG)
            .arg(theirs.as_raw_fd().to_string())
            .stdin(Stdio::null())
            .spawn();
        drop(theirs);
        let child = spawned.map_err(|e| {
            err(
                e.kind(),
                format!("starting successor {}: {e}", exe.display()),
            )
        })?;
        Ok(Started {
            child: Some(child),
            sock: mine,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Reads one frame, or says how the successor failed.
    pub(crate) fn recv(&mut self, limit: Duration, what: &str) -> std::io::Result<bytes::Bytes> {
        self.sock.set_read_timeout(Some(limit))?;
        match wire::recv(&self.sock) {
            Ok((b, _)) => Ok(b),
            Err(e) => {
                // A successor that closed its end is usually exiting: give
                // its status a moment to be had, for the message.
                let mut status = None;
                for _ in 0..100 {
                    status = self
                        .child
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten());
                    if status.is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(err(
                    e.kind(),
                    match status {
                        Some(s) => format!("the successor exited ({s}) {what}"),
                        None => format!("the successor did not answer {what}: {e}"),
                    },
                ))
            }
        }
    }

    /// The successor runs on as the server.
    fn leave(mut self) {
        self.child = None;
    }

    /// The successor runs on as the server, its process the caller's to
    /// wait for.
    pub(crate) fn keep(mut self) -> Option<Child> {
        self.child.take()
    }

    /// The socket to the successor.
    pub(crate) fn sock(&self) -> &UnixStream {
        &self.sock
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A reply of the successor: `{"ok": ...}` or `{"error": why}`.
pub(crate) fn parse_reply(b: &[u8]) -> std::io::Result<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_slice(b)
        .map_err(|e| err(std::io::ErrorKind::InvalidData, format!("successor: {e}")))?;
    if let Some(why) = v.get("error").and_then(|e| e.as_str()) {
        return Err(err(std::io::ErrorKind::Other, format!("successor: {why}")));
    }
    Ok(v)
}

fn hand_over(
    inner: &Inner,
    ctx: &Upgradable,
    child: &mut Started,
) -> std::io::Result<UpgradeReport> {
    let hello = parse_reply(&child.recv(START_LIMIT, "at start")?)?;
    let theirs = hello.get("state_version").and_then(|v| v.as_u64());
    if !super::state::reads_ours(&hello) {
        return Err(err(
            std::io::ErrorKind::Unsupported,
            format!(
                "the successor reads server state version {theirs:?}, this server writes \
                 version {VERSION}"
            ),
        ));
    }
    // Nodes this server adopted from its own predecessor and was never
    // asked for: found now, before requests are parked (the file
    // system's state must cover them).
    inner.nodes.resolve_adopted();
    // Stops recording count changes however this ends.
    let _recording = Recording(&inner.nodes.changes);
    let ahead = match hello.get("nodes_ahead").and_then(|v| v.as_bool()) {
        Some(true) => Some(send_ahead(inner, child)?),
        _ => None,
    };
    let started = Instant::now();
    let parked_at_ns = monotonic_ns();
    ctx.pauser.park(PARK_LIMIT)?;
    let parked = Parked(&ctx.pauser, true);
    if !inner.offload.wait_idle(PARK_LIMIT) {
        return Err(err(
            std::io::ErrorKind::TimedOut,
            "requests handed to the offload threads did not finish",
        ));
    }
    // After the offloaded requests are answered: a reply given once the
    // queues are sealed is kept aside and its request served again.
    let ring = ctx.pauser.seal_rings(PARK_LIMIT)?;
    let t_parked = started.elapsed();
    // `_nodes` holds the saved nodes' vnodes until the hand-over is over:
    // letting a million go is no work for requests to wait on.
    let (state, fds, counts, _nodes) = save(inner, ctx, parked_at_ns, Some((ring, ahead)))?;
    let t_saved = started.elapsed();
    let head = state.encode_head()?;
    let t_encoded = started.elapsed();
    let parts = [&head[..], &state.fs_bytes[..]];
    // A successor that reads frames in memfds gets a large state in one
    // (older builds do not say so, and get it through the socket).
    let sealed = hello.get("frames_in_memfd").and_then(|v| v.as_bool()) == Some(true)
        && head.len() + state.fs_bytes.len() >= wire::SEALED_FROM;
    let send = if sealed {
        wire::send_parts_sealed
    } else {
        wire::send_parts
    };
    if let Err(e) = send(&child.sock, &parts, &wire::borrow_all(&fds)) {
        // A successor that refused the state may have said why and gone
        // before taking all of it: its reason is the news, not the pipe.
        return Err(
            match child.recv(Duration::from_secs(1), "while taking the state") {
                Ok(b) => parse_reply(&b).err().unwrap_or(e),
                Err(_) => err(e.kind(), format!("sending the state to the successor: {e}")),
            },
        );
    }
    drop(fds);
    log::info!(
        "hand-over: parked after {} ms, state saved at {} ms, encoded at {} ms ({} bytes), \
         sent at {} ms{}",
        t_parked.as_millis(),
        t_saved.as_millis(),
        t_encoded.as_millis(),
        head.len() + state.fs_bytes.len(),
        started.elapsed().as_millis(),
        if sealed { " (in a sealed memfd)" } else { "" }
    );
    // From "taking", the successor may be answering requests: serving on
    // here would answer from a state that misses what it did. A successor
    // that fails after that is a crash of the mount's server.
    let taking = parse_reply(&child.recv(TAKE_LIMIT, "while taking the state over")?)?;
    if taking.get("taking").is_none() {
        return Err(err(
            std::io::ErrorKind::InvalidData,
            "successor: unexpected reply",
        ));
    }
    parked.commit();
    inner.fs.handed_over();
    let done = child
        .recv(TAKE_LIMIT, "after taking the connection")
        .and_then(|b| parse_reply(&b));
    let pause_us = match done {
        Ok(v) => v.get("pause_us").and_then(|p| p.as_u64()).unwrap_or(0),
        Err(e) => {
            log::error!("the successor failed after taking the mount over: {e}");
            started.elapsed().as_micros() as u64
        }
    };
    inner.lineage.handed_over.store(true, Ordering::SeqCst);
    inner.backings.keep_ids_open();
    Ok(UpgradeReport {
        pid: child.pid(),
        generation: state.generation,
        pause_us,
        nodes: counts.0,
        handles: counts.1,
    })
}

/// Held nodes, sorted by inode number.
#[derive(Default)]
struct Found {
    /// Each node's (inode, id, count).
    keys: Vec<(u64, u64, u64)>,
    /// Their vnodes, in the same order.
    vps: Vec<VnodeRef>,
    /// What the file system made of them while requests were served
    /// (`FileSystem::save_ahead`).
    fs: Option<uvfs_vfs::Ahead>,
}

/// Every node the kernel holds, sorted by inode number (found from the
/// node id, which is the inode number but for the root's swap,
/// `nodes.rs`: reading it from each vnode again would cost a million
/// cache misses), on as many threads as there are: the node ids then
/// come sorted too, as the successor takes them
/// (`NodeTable::adopt_all_lazily`), and so do the file system's records
/// of them.
fn find_held(inner: &Inner) -> Found {
    let mut held: Vec<(u64, u64, VnodeRef, u64)> = inner
        .nodes
        .snapshot()
        .into_iter()
        .map(|(id, vp, count)| (inner.nodes.node_id(id), id, vp, count))
        .collect();
    use rayon::slice::ParallelSliceMut;
    held.par_sort_unstable_by_key(|n| n.0);
    let mut found = Found {
        keys: Vec::with_capacity(held.len()),
        vps: Vec::with_capacity(held.len()),
        fs: None,
    };
    for (ino, id, vp, count) in held {
        found.keys.push((ino, id, count));
        found.vps.push(vp);
    }
    found
}

/// Sends the successor the nodes the kernel holds while requests are
/// still served, count changes recorded from before the walk on
/// (`ahead.rs`), and has the file system make its part of the state
/// for them (`FileSystem::save_ahead`); returns them once the successor
/// has read them.
fn send_ahead(inner: &Inner, child: &mut Started) -> std::io::Result<Found> {
    let t0 = Instant::now();
    inner.nodes.changes.start();
    let mut held = find_held(inner);
    let frame = super::ahead::encode(held.keys.iter().map(|&(ino, id, count)| (id, ino, count)));
    let send = if frame.len() >= wire::SEALED_FROM {
        wire::send_parts_sealed
    } else {
        wire::send_parts
    };
    send(&child.sock, &[&frame], &[])
        .map_err(|e| err(e.kind(), format!("sending the nodes ahead: {e}")))?;
    drop(frame);
    // While the successor reads them.
    let t_sent = t0.elapsed();
    held.fs = inner
        .fs
        .save_ahead(&held.vps)
        .map_err(|e| fs_refused(inner, e))?;
    let t_fs = t0.elapsed();
    let read = parse_reply(&child.recv(TAKE_LIMIT, "while reading the nodes sent ahead")?)?;
    if read.get("ahead").and_then(|v| v.as_u64()) != Some(held.keys.len() as u64) {
        return Err(err(
            std::io::ErrorKind::InvalidData,
            "successor: unexpected reply to the nodes sent ahead",
        ));
    }
    log::debug!(
        "hand-over: {} nodes sent ahead at {} ms, the file system's part made at {} ms{}, \
         read by the successor at {} ms",
        held.keys.len(),
        t_sent.as_millis(),
        t_fs.as_millis(),
        if held.fs.is_some() { "" } else { " (none)" },
        t0.elapsed().as_millis()
    );
    Ok(held)
}

/// The file system's refusal to save its state, as the upgrade's error.
fn fs_refused(inner: &Inner, e: uvfs_vfs::Errno) -> std::io::Error {
    err(
        std::io::ErrorKind::Unsupported,
        format!(
            "the file system ({}) cannot hand its state over: {e}",
            inner.fs.fs_type()
        ),
    )
}

/// Count changes recorded until dropped.
struct Recording<'a>(&'a crate::count_changes::CountChanges);

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The nodes sent ahead brought up to date with the loops parked.
struct CaughtUp {
    /// The changed nodes' states (sorted by id; a count of 0: forgotten
    /// since), which the successor applies to what it read ahead.
    states: Vec<NodeState>,
    /// Nodes the kernel holds now.
    held: usize,
    /// The vnodes `FileSystem::save` gets: with the file system's part
    /// made ahead, those of nodes not sent ahead that are cached now
    /// (held or not: known for a moment since); without it, every node
    /// held now, sorted by inode.
    keep: Vec<VnodeRef>,
    /// Every vnode referenced, kept until the hand-over is over.
    refs: Vec<VnodeRef>,
    fs: Option<uvfs_vfs::Ahead>,
}

/// Brings the nodes sent ahead up to date: each node whose count changed
/// since is read again.
fn catch_up(inner: &Inner, mut ahead: Found) -> CaughtUp {
    let mut changed: Vec<(u64, u64)> = inner
        .nodes
        .changes
        .stop()
        .into_iter()
        .map(|id| (inner.nodes.node_id(id), id))
        .collect();
    changed.sort_unstable();
    let mut states = Vec::with_capacity(changed.len());
    let mut fresh: Vec<(u64, VnodeRef, u64)> = Vec::new();
    // Both in inode order: each changed node is looked for from where
    // the last one was found, in steps that double (a few changes cost a
    // binary search each, a storm of them, such as the FORGETs of a
    // million nodes, one pass), and one sent ahead is read from the
    // vnode already referenced, not looked up in the vnode table.
    let mut at = 0;
    for (ino, id) in changed {
        at += gallop(&ahead.keys[at..], |n| n.0, ino);
        let count = match ahead.keys.get_mut(at).filter(|n| n.0 == ino) {
            Some(n) => {
                n.2 = ahead.vps[at].ext_count();
                n.2
            }
            None => match inner.nodes.cached(id) {
                Some(vp) => {
                    let count = vp.ext_count();
                    fresh.push((ino, vp, count));
                    count
                }
                None => 0,
            },
        };
        states.push(NodeState { id, ino, count });
    }
    // By id, as the state's nodes are (the root's swap aside, the same).
    states.sort_unstable_by_key(|n| n.id);
    let held =
        ahead.keys.iter().filter(|n| n.2 > 0).count() + fresh.iter().filter(|n| n.2 > 0).count();
    if ahead.fs.is_some() {
        let keep: Vec<VnodeRef> = fresh.into_iter().map(|n| n.1).collect();
        let mut refs = ahead.vps;
        refs.extend(keep.iter().cloned());
        return CaughtUp {
            states,
            held,
            keep,
            refs,
            fs: ahead.fs,
        };
    }
    // Every node held now, sorted by inode: one pass, moving the vnode
    // references (no count touched), a million of them against the few
    // nodes new since.
    let mut keep = Vec::with_capacity(held);
    let mut fresh = fresh.into_iter().filter(|n| n.2 > 0).peekable();
    for (key, vp) in ahead.keys.iter().zip(ahead.vps) {
        while let Some(f) = fresh.next_if(|f| f.0 < key.0) {
            keep.push(f.1);
        }
        if key.2 > 0 {
            keep.push(vp);
        }
    }
    keep.extend(fresh.map(|f| f.1));
    CaughtUp {
        states,
        held,
        keep,
        refs: Vec::new(),
        fs: None,
    }
}

/// How many of `sorted`'s first entries have inodes below `ino`: a
/// search whose cost grows with the log of that number, not of the
/// slice's length.
fn gallop<T>(sorted: &[T], key: impl Fn(&T) -> u64, ino: u64) -> usize {
    let mut hi = 1;
    while hi < sorted.len() && key(&sorted[hi - 1]) < ino {
        hi *= 2;
    }
    let hi = hi.min(sorted.len());
    let lo = hi / 2;
    lo + sorted[lo..hi].partition_point(|n| key(n) < ino)
}

/// Parked request loops, unparked when dropped unless committed.
struct Parked<'a>(&'a fuser::Pauser, bool);

impl Parked<'_> {
    fn commit(mut self) {
        self.1 = false;
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.unpark();
        }
    }
}

type SavedState = (ServerState, Vec<OwnedFd>, (usize, usize), Vec<VnodeRef>);

/// What a supervisor keeps for a server started after a crash: the
/// server's state with no node or handle (the journal has them), the
/// file system's as it saves it with nothing to keep (`supervise/`).
pub(crate) fn base_state(
    inner: &Inner,
    ctx: &Upgradable,
) -> std::io::Result<(ServerState, Vec<OwnedFd>)> {
    let (mut state, fds, _, _) = save(inner, ctx, monotonic_ns(), None)?;
    // The successor of a crash is the next generation of this one.
    state.generation -= 1;
    state.restarts -= 1;
    state.link = false;
    Ok((state, fds))
}

/// The server's state (loops parked) and its descriptors: the
/// connection's first, then the ring entries' (`ring`), the file
/// system's, then the supervisor link's. Without `ring` (a supervisor's
/// base state), no node or handle. With nodes sent ahead, the state's
/// nodes are those whose counts changed since (`ahead.rs`).
fn save(
    inner: &Inner,
    ctx: &Upgradable,
    parked_at_ns: u64,
    ring: Option<(Vec<fuser::RingEntry>, Option<Found>)>,
) -> std::io::Result<SavedState> {
    let all = ring.is_some();
    let (ring, ahead) = ring.unwrap_or_default();
    let t0 = Instant::now();
    let (open, next_handle) = match all {
        true => inner.handles.snapshot(),
        false => (Vec::new(), 0),
    };
    let (nodes, node_vps, refs, held_count, fs_ahead, sent_ahead) = match (all, ahead) {
        (false, _) => (Vec::new(), Vec::new(), Vec::new(), 0, None, false),
        (true, None) => {
            let found = find_held(inner);
            let nodes: Vec<NodeState> = found
                .keys
                .iter()
                .map(|&(ino, id, count)| NodeState { id, ino, count })
                .collect();
            let n = nodes.len();
            (nodes, found.vps, Vec::new(), n, None, false)
        }
        (true, Some(ahead)) => {
            let c = catch_up(inner, ahead);
            (c.states, c.keep, c.refs, c.held, c.fs, true)
        }
    };
    let t_snap = t0.elapsed();
    let open_pairs: Vec<(VnodeRef, uvfs_vfs::Fh)> =
        open.iter().map(|(_, f)| (f.vp.clone(), f.fh)).collect();
    let saved = inner
        .fs
        .save(&Keep {
            nodes: &node_vps,
            open: &open_pairs,
            ahead: fs_ahead.as_ref(),
        })
        .map_err(|e| fs_refused(inner, e))?;
    let t_fs = t0.elapsed();
    let handles: Vec<HandleState> = open
        .iter()
        .map(|(h, f)| HandleState {
            fh: *h,
            ino: f.vp.ino(),
            fs_fh: f.fh.0,
            writable: f.writable,
            backing_node: f.backing_node,
            kernel_writer: f.kernel_writer,
            flags: f.flags,
            backing_id: f.backing_id,
        })
        .collect();
    let t_nodes = t0.elapsed();
    let mut counters: Vec<(String, u64)> = inner
        .counters
        .by_op
        .pairs()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let c = &inner.counters;
    for (n, a) in [
        ("requests", &c.requests),
        ("errors", &c.errors),
        ("panics", &c.panics),
    ] {
        counters.push((format!("fuse.{n}"), a.load(Ordering::Relaxed)));
    }
    let mut fds = vec![ctx.dev.try_clone()?];
    let ring_state = ring.iter().map(|e| (e.qid, e.addr, e.replied)).collect();
    fds.extend(ring.into_iter().map(|e| e.memfd));
    let fs_fds = saved.fds.len() as u32;
    fds.extend(saved.fds);
    let generation = inner.lineage.generation.load(Ordering::Relaxed) + 1;
    let counts = (held_count, handles.len());
    let mut state = ServerState {
        negotiated: ctx.negotiated.clone(),
        no_opendir: inner.no_opendir.load(Ordering::Relaxed),
        backings_on: inner.backings.on.load(Ordering::Relaxed),
        nodes,
        handles,
        next_handle,
        backings: inner.backings.export(),
        written: inner.backings.writers.export(),
        mount: ctx.mount.clone(),
        generation,
        restarts: inner.lineage.restarts.load(Ordering::Relaxed) + 1,
        parked_at_ns,
        counters,
        fs_format: saved.format,
        fs_bytes: saved.bytes,
        fs_fds,
        app: ctx.successor.app.clone(),
        journal: false,
        journal_live: false,
        link: false,
        ring: ring_state,
        kept: Vec::new(),
    };
    if let Some(j) = inner.journal.get().filter(|_| all) {
        if let Some(fd) = j.dup_table()? {
            state.journal_live = true;
            fds.push(fd);
        }
    }
    if let Some(dup) = ctx.link.get() {
        state.link = true;
        fds.push(dup()?);
    }
    if all {
        log::debug!(
            "hand-over: nodes found at {} ms ({} sent: {}), file system saved at {} ms, \
             handles at {} ms, all at {} ms",
            t_snap.as_millis(),
            state.nodes.len(),
            if sent_ahead {
                "those changed since they were sent ahead"
            } else {
                "all"
            },
            t_fs.as_millis(),
            t_nodes.as_millis(),
            t0.elapsed().as_millis()
        );
    }
    let mut kept = refs;
    kept.extend(node_vps);
    Ok((state, fds, counts, kept))
}

#[cfg(test)]
mod tests {
    use super::gallop;

    #[test]
    fn gallop_counts_the_entries_below_a_key_from_any_start() {
        let sorted: Vec<u64> = (0..1000).map(|i| i * 3).collect();
        for ino in 0..3010 {
            let want = sorted.iter().filter(|&&k| k < ino).count();
            assert_eq!(gallop(&sorted, |&k| k, ino), want, "{ino}");
            let from = want.saturating_sub(5);
            assert_eq!(from + gallop(&sorted[from..], |&k| k, ino), want, "{ino}");
        }
        assert_eq!(gallop(&[] as &[u64], |&k| k, 7), 0);
    }
}
