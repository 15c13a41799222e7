//! The test's side of the socket, in the kernel's place: sends requests,
//! waits for exactly one reply each, and keeps the lookup counts and
//! open handles a kernel would hold, to check the server's tables
//! against after every request.

use crate::shape::{check_shape, direntplus_ids, dirents};
use crate::socket::{seqpacket_pair, set_recv_timeout, sndbuf, widen};
use crate::wire::{
    b, create_in, getattr_in, hex, mkdir_in, op_name, read_in, release_in, u32_at, u64_at,
    BATCH_FORGET, CREATE, DESTROY, ENTRY_OUT, ESTALE, FORGET, GETATTR, HEADER, INIT, INIT_FLAGS,
    LINK, LOOKUP, MKDIR, MKNOD, OPEN, OPENDIR, OUT_HEADER, READDIR, READDIRPLUS, RELEASE,
    RELEASEDIR, REPLY_TIMEOUT, ROOT, STATFS, SYMLINK, TMPFILE,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uvfs_fuse::{serve_fd, BackgroundMount, ServeConfig, Timeouts, MAX_WRITE};
use uvfs_vfs::FileSystem;
use uvfs_vnode::VnodeLayer;

/// One reply.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) error: i32,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn errno(&self) -> i32 {
        -self.error
    }
    pub(crate) fn ok(&self) -> bool {
        self.error == 0
    }
    /// The node id of an entry reply (0: none, a negative entry).
    pub(crate) fn nodeid(&self) -> u64 {
        if self.ok() && self.body.len() >= 8 {
            u64_at(&self.body, 0)
        } else {
            0
        }
    }
}

/// What the kernel knows: the lookup counts the server's replies handed
/// it, and the handles it opened.
pub(crate) struct Kernel {
    pub(crate) fd: OwnedFd,
    pub(crate) mount: Option<BackgroundMount>,
    pub(crate) unique: u64,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// The caller's thread id the requests carry (0: one the server
    /// cannot see, judged by its uid alone).
    pub(crate) pid: u32,
    /// Node id -> lookup count, as the kernel would hold them.
    pub(crate) counts: BTreeMap<u64, u64>,
    /// Every node id a reply ever named (forgotten ones too), in the order
    /// first named: the random phase picks by position, so a seed replays
    /// the same requests on passthrough too, whose ids are inode numbers.
    pub(crate) seen: Vec<u64>,
    /// File handles opened and not released.
    pub(crate) open: BTreeSet<u64>,
    /// Handles released (stale from then on).
    pub(crate) released: Vec<u64>,
    /// The last requests, for failure messages.
    pub(crate) recent: VecDeque<String>,
    /// Prefix for failure messages (the random phase's seed and step).
    pub(crate) tag: String,
    /// Requests sent.
    pub(crate) sent: u64,
    /// A node the kernel holds may still answer ESTALE: the file system
    /// (passthrough) cannot reach an unlinked file it has no fd for.
    pub(crate) held_may_vanish: bool,
    /// Replies up to this size fit through the socket.
    pub(crate) max_message: usize,
    /// Receive buffer, larger than any datagram.
    pub(crate) buf: Vec<u8>,
}

impl Kernel {
    /// Serves `fs` on a socket and plays the kernel's part of INIT.
    pub(crate) fn start(
        fs: Arc<dyn FileSystem>,
        layer: Arc<VnodeLayer>,
        server_opendir: bool,
    ) -> Kernel {
        let (ours, theirs) = seqpacket_pair();
        widen(&ours);
        widen(&theirs);
        set_recv_timeout(&ours, REPLY_TIMEOUT);
        let max_message = sndbuf(&theirs).min(sndbuf(&ours));
        // SAFETY: geteuid and getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let mut k = Kernel {
            fd: ours,
            mount: None,
            unique: 0,
            uid,
            gid,
            pid: std::process::id(),
            counts: BTreeMap::from([(ROOT, 1)]),
            seen: vec![ROOT],
            open: BTreeSet::new(),
            released: Vec::new(),
            recent: VecDeque::new(),
            tag: String::new(),
            sent: 0,
            held_may_vanish: false,
            max_message,
            buf: vec![0; 8 << 20],
        };
        // INIT first: serve_fd answers it before returning.
        let init = b()
            .u32(7)
            .u32(31)
            .u32(128 << 10)
            .u32(INIT_FLAGS)
            .u32(0)
            .bytes(&[0; 44])
            .done();
        let unique = k.send(INIT, 0, &init);
        let cfg = ServeConfig {
            mountpoint: PathBuf::from("raw-protocol"),
            threads: 1,
            timeouts: Timeouts {
                entry: Duration::from_secs(1),
                attr: Duration::from_secs(1),
            },
            fsname: "uvfs-raw".into(),
            control: false,
            server_opendir,
            uring: false,
            read_only: false,
            mount_flags: 0,
            kernel_io: false,
            dir_refresh: false,
            allow_other: false,
            successor: None,
            supervise: false,
        };
        k.mount = Some(serve_fd(fs, layer, theirs, &cfg).expect("serve_fd"));
        let r = k.recv_for(unique, "INIT");
        assert!(r.ok(), "INIT failed: {r:?}");
        assert!(r.body.len() >= 24, "short INIT reply {r:?}");
        assert_eq!(u32_at(&r.body, 0), 7, "major");
        assert_eq!(u32_at(&r.body, 20), MAX_WRITE, "max_write");
        k
    }

    pub(crate) fn mount(&self) -> &BackgroundMount {
        self.mount.as_ref().expect("serving")
    }

    pub(crate) fn next_unique(&mut self) -> u64 {
        // The kernel's request ids go up by two; odd ones are interrupts.
        self.unique += 2;
        self.unique
    }

    pub(crate) fn describe(op: u32, nodeid: u64, body: &[u8]) -> String {
        format!("{} nodeid={nodeid:#x} body={}", op_name(op), hex(body))
    }

    pub(crate) fn fail(&self, what: &str) -> ! {
        let recent: Vec<&str> = self.recent.iter().map(String::as_str).collect();
        panic!(
            "{}{what}\n  the last requests, oldest first:\n    {}",
            self.tag,
            recent.join("\n    ")
        );
    }

    pub(crate) fn note(&mut self, desc: String) {
        if self.recent.len() == 12 {
            self.recent.pop_front();
        }
        self.recent.push_back(desc);
        self.sent += 1;
    }

    /// Writes one message.
    pub(crate) fn send_raw(&mut self, msg: &[u8]) {
        // SAFETY: `msg` is valid for reads of its length; the fd is open.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n != msg.len() as isize {
            let e = std::io::Error::last_os_error();
            self.fail(&format!("sending {} bytes: {n} ({e})", msg.len()));
        }
    }

    /// A message with header length `len`, of which `body` follows the
    /// header (they disagree in the malformed cases).
    pub(crate) fn message(
        &self,
        op: u32,
        unique: u64,
        nodeid: u64,
        len: u32,
        body: &[u8],
    ) -> Vec<u8> {
        b().u32(len)
            .u32(op)
            .u64(unique)
            .u64(nodeid)
            .u32(self.uid)
            .u32(self.gid)
            .u32(self.pid)
            .u32(0)
            .bytes(body)
            .done()
    }

    /// Sends a request; returns its unique.
    pub(crate) fn send(&mut self, op: u32, nodeid: u64, body: &[u8]) -> u64 {
        let unique = self.next_unique();
        let len = (HEADER + body.len()) as u32;
        let msg = self.message(op, unique, nodeid, len, body);
        self.note(Self::describe(op, nodeid, body));
        self.send_raw(&msg);
        unique
    }

    /// The next message: `None` on timeout; fails if the server closed
    /// the channel.
    pub(crate) fn recv_any(&mut self, desc: &str) -> Option<(u64, i32, Vec<u8>)> {
        // SAFETY: the buffer is valid for writes of its length; the fd is
        // open.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return None;
            }
            self.fail(&format!("recv after {desc}: {e}"));
        }
        let n = n as usize;
        if n == 0 {
            self.fail(&format!(
                "the server closed the channel after {desc} (its request loop died)"
            ));
        }
        if n > self.buf.len() || n < OUT_HEADER {
            self.fail(&format!("reply of {n} bytes to {desc}"));
        }
        let len = u32_at(&self.buf, 0) as usize;
        let error = u32_at(&self.buf, 4) as i32;
        let unique = u64_at(&self.buf, 8);
        if len != n {
            self.fail(&format!(
                "reply to {desc}: header says {len} bytes, message has {n}"
            ));
        }
        Some((unique, error, self.buf[OUT_HEADER..n].to_vec()))
    }

    /// The next message, or `None` on timeout or a closed channel.
    pub(crate) fn recv_any_quiet(&mut self) -> Option<(u64, i32, Vec<u8>)> {
        // SAFETY: the buffer is valid for writes of its length; the fd is
        // open.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                0,
            )
        };
        if n < OUT_HEADER as isize {
            return None;
        }
        let n = n as usize;
        let error = u32_at(&self.buf, 4) as i32;
        let unique = u64_at(&self.buf, 8);
        Some((unique, error, self.buf[OUT_HEADER..n].to_vec()))
    }

    /// The reply to request `unique`: notifications (unique 0) and
    /// interrupt answers (odd uniques) in between are checked and skipped.
    pub(crate) fn recv_for(&mut self, unique: u64, desc: &str) -> Reply {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let Some((u, error, body)) = self.recv_any(desc) else {
                self.fail(&format!("no reply within {REPLY_TIMEOUT:?} to {desc}"));
            };
            if Instant::now() > deadline {
                self.fail(&format!("no reply within {REPLY_TIMEOUT:?} to {desc}"));
            }
            if u == 0 {
                continue;
            }
            if !(-4095..=0).contains(&error) {
                self.fail(&format!("errno {error} out of range in reply to {desc}"));
            }
            if error != 0 && !body.is_empty() {
                self.fail(&format!("error {error} with a body in reply to {desc}"));
            }
            if u & 1 == 1 {
                continue;
            }
            if u != unique {
                self.fail(&format!(
                    "reply for unique {u} while waiting for {unique} ({desc}): \
                     a stray or lost reply"
                ));
            }
            return Reply { error, body };
        }
    }

    /// Sends a request and returns its checked reply.
    pub(crate) fn call(&mut self, op: u32, nodeid: u64, body: &[u8]) -> Reply {
        let unique = self.send(op, nodeid, body);
        let desc = Self::describe(op, nodeid, body);
        self.answered(unique, op, nodeid, body, desc)
    }

    /// `call`, marked as the kernel marks a request it sends again to the
    /// server started after the one that read it died
    /// (`FUSE_UNIQUE_RESEND`, bit 63 of the unique id).
    pub(crate) fn call_resent(&mut self, op: u32, nodeid: u64, body: &[u8]) -> Reply {
        let unique = self.next_unique() | 1 << 63;
        let len = (HEADER + body.len()) as u32;
        let msg = self.message(op, unique, nodeid, len, body);
        let desc = format!("resent {}", Self::describe(op, nodeid, body));
        self.note(desc.clone());
        self.send_raw(&msg);
        self.answered(unique, op, nodeid, body, desc)
    }

    /// The reply to request `unique`, checked and accounted.
    fn answered(&mut self, unique: u64, op: u32, nodeid: u64, body: &[u8], desc: String) -> Reply {
        let r = self.recv_for(unique, &desc);
        if r.ok() {
            if let Err(why) = check_shape(op, nodeid, body, &r.body) {
                self.fail(&format!("bad answer to {desc}: {why}"));
            }
            self.account(op, nodeid, body, &r);
        }
        self.check_state(&desc);
        r
    }

    /// A request without a reply (FORGET, BATCH_FORGET): a STATFS after
    /// it must be the next thing answered.
    pub(crate) fn no_reply(&mut self, op: u32, nodeid: u64, body: &[u8]) {
        let desc = Self::describe(op, nodeid, body);
        let forget_unique = self.send(op, nodeid, body);
        match op {
            FORGET if body.len() >= 8 => self.forget(nodeid, u64_at(body, 0)),
            BATCH_FORGET if body.len() >= 8 => {
                let count = u32_at(body, 0) as usize;
                if body.len() >= 8 + 16 * count {
                    for i in 0..count {
                        let at = 8 + 16 * i;
                        self.forget(u64_at(body, at), u64_at(body, at + 8));
                    }
                }
            }
            _ => {}
        }
        let unique = self.send(STATFS, ROOT, &[]);
        let (u, _, _) = loop {
            match self.recv_any(&desc) {
                None => self.fail(&format!("no reply to the STATFS after {desc}")),
                Some((0, ..)) => continue,
                Some(m) => break m,
            }
        };
        if u == forget_unique {
            self.fail(&format!("a reply to {desc}, which takes none"));
        }
        if u != unique {
            self.fail(&format!("reply for unique {u} after {desc}"));
        }
        self.check_state(&desc);
    }

    /// Sends a request that may or may not be answered (INTERRUPT,
    /// malformed ones fuser may drop): drains up to the next STATFS.
    pub(crate) fn maybe_reply(&mut self, op: u32, nodeid: u64, body: &[u8]) -> Option<Reply> {
        let unique = self.send(op, nodeid, body);
        self.drain_until_statfs(unique, &Self::describe(op, nodeid, body))
    }

    /// A raw message with header length `len` (possibly a lie).
    pub(crate) fn maybe_reply_raw(
        &mut self,
        op: u32,
        nodeid: u64,
        len: u32,
        body: &[u8],
    ) -> Option<Reply> {
        let unique = self.next_unique();
        let msg = self.message(op, unique, nodeid, len, body);
        let desc = format!("{} (header len {len})", Self::describe(op, nodeid, body));
        self.note(desc.clone());
        self.send_raw(&msg);
        self.drain_until_statfs(unique, &desc)
    }

    pub(crate) fn drain_until_statfs(&mut self, unique: u64, desc: &str) -> Option<Reply> {
        let probe = self.send(STATFS, ROOT, &[]);
        let mut got = None;
        loop {
            let Some((u, error, body)) = self.recv_any(desc) else {
                self.fail(&format!("no reply to the STATFS after {desc}"));
            };
            if !(-4095..=0).contains(&error) && u != 0 {
                self.fail(&format!("errno {error} out of range after {desc}"));
            }
            if u == probe {
                break;
            }
            if u == unique || u == unique | 1 {
                if got.is_some() {
                    self.fail(&format!("two replies to {desc}"));
                }
                got = Some(Reply { error, body });
            } else if u != 0 {
                self.fail(&format!("reply for unique {u} after {desc}"));
            }
        }
        self.check_state(desc);
        got
    }

    // -- The model ---------------------------------------------------------

    pub(crate) fn remember(&mut self, id: u64) {
        if id != 0 {
            *self.counts.entry(id).or_insert(0) += 1;
            if !self.seen.contains(&id) {
                self.seen.push(id);
            }
        }
    }

    /// FORGET as the server must apply it: clamped at zero, and the root
    /// never below one.
    pub(crate) fn forget(&mut self, id: u64, n: u64) {
        let Some(c) = self.counts.get_mut(&id) else {
            return;
        };
        *c = if id == ROOT {
            (*c).saturating_sub(n).max(1)
        } else {
            (*c).saturating_sub(n)
        };
        if *c == 0 {
            self.counts.remove(&id);
        }
    }

    /// Learns from a successful reply what a kernel would.
    pub(crate) fn account(&mut self, op: u32, _nodeid: u64, body: &[u8], r: &Reply) {
        match op {
            LOOKUP | MKNOD | MKDIR | SYMLINK | LINK => self.remember(r.nodeid()),
            CREATE | TMPFILE => {
                self.remember(r.nodeid());
                self.open.insert(u64_at(&r.body, ENTRY_OUT));
            }
            OPEN | OPENDIR => {
                self.open.insert(u64_at(&r.body, 0));
            }
            RELEASE | RELEASEDIR => {
                let fh = u64_at(body, 0);
                self.open.remove(&fh);
                self.released.push(fh);
            }
            READDIRPLUS => {
                for (id, _, name) in direntplus_ids(&r.body) {
                    // (Node id 0 lists a name without handing its node.)
                    if name != b"." && name != b".." && id != 0 {
                        self.remember(id);
                    }
                }
            }
            _ => {}
        }
    }

    pub(crate) fn counter(&self, report: &serde_json::Value, name: &str) -> u64 {
        report["counters"][name]
            .as_u64()
            .unwrap_or_else(|| panic!("no counter {name}"))
    }

    /// No panic so far, and the node and handle tables as the model says.
    pub(crate) fn check_state(&mut self, after: &str) {
        let rep = self.mount().report(false);
        let panics = self.counter(&rep, "fuse.requests.panics");
        if panics != 0 {
            self.fail(&format!("a handler panicked on {after}"));
        }
        let nodes = self.counter(&rep, "fuse.nodes");
        let lookups = self.counter(&rep, "fuse.nodes.lookups");
        let handles = self.counter(&rep, "fuse.handles.open");
        let remembered = self.counter(&rep, "fuse.nodes.remembered");
        let forgotten = self.counter(&rep, "fuse.nodes.forgotten");
        // The root's first count is the kernel's from the start.
        if remembered + 1 != forgotten + lookups {
            self.fail(&format!(
                "after {after}: {remembered} lookups remembered + 1 != {forgotten} \
                 forgotten + {lookups} held"
            ));
        }
        let want_lookups: u64 = self.counts.values().sum();
        let want_nodes = self.counts.len() as u64;
        if (nodes, lookups) != (want_nodes, want_lookups) {
            self.fail(&format!(
                "after {after}: the server counts {nodes} nodes / {lookups} lookups, \
                 the kernel holds {want_nodes} / {want_lookups} ({:?})",
                self.counts
            ));
        }
        if handles != self.open.len() as u64 {
            self.fail(&format!(
                "after {after}: {handles} open handles, the kernel opened {}",
                self.open.len()
            ));
        }
    }

    /// Every node the kernel holds answers GETATTR; every one it let go
    /// of is ESTALE.
    pub(crate) fn check_held(&mut self) {
        for id in self.seen.clone() {
            let held = self.counts.contains_key(&id);
            let r = self.call(GETATTR, id, &getattr_in(None));
            if held && !r.ok() && !(self.held_may_vanish && r.errno() == ESTALE) {
                self.fail(&format!(
                    "node {id:#x} is held ({} lookups) but GETATTR says errno {}",
                    self.counts[&id],
                    r.errno()
                ));
            }
            if !held && r.errno() != ESTALE {
                self.fail(&format!(
                    "node {id:#x} was forgotten but GETATTR answers {:?}",
                    r.error
                ));
            }
        }
    }

    /// Releases every open handle, then checks the accounting at rest:
    /// every active vnode explained by a kernel reference.
    pub(crate) fn settle(&mut self) {
        let open: Vec<u64> = self.open.iter().copied().collect();
        for fh in open {
            // The model does not know files from directories: RELEASE
            // and RELEASEDIR take the same handle table.
            let r = self.call(RELEASE, ROOT, &release_in(fh));
            if !r.ok() {
                self.fail(&format!(
                    "RELEASE of open handle {fh} failed: {}",
                    r.errno()
                ));
            }
        }
        let rep = self.mount().report(true);
        if rep["accounting"]["ok"] != serde_json::json!(true) {
            self.fail(&format!("vnode accounting at rest: {}", rep["accounting"]));
        }
        self.check_held();
    }

    /// Ends the session as the kernel does at unmount.
    pub(crate) fn finish(mut self) {
        self.settle();
        let unique = self.send(DESTROY, 0, &[]);
        let r = self.recv_for(unique, "DESTROY");
        assert!(r.ok(), "DESTROY: {r:?}");
        let m = self.mount.take().expect("serving");
        m.unmount().expect("the session ends cleanly after DESTROY");
    }

    // -- Shorthands ----------------------------------------------------------

    pub(crate) fn lookup(&mut self, dir: u64, name: &[u8]) -> Reply {
        self.call(LOOKUP, dir, &b().name(name).done())
    }

    pub(crate) fn mkdir(&mut self, dir: u64, name: &[u8]) -> Reply {
        self.call(MKDIR, dir, &mkdir_in(0o755, name))
    }

    /// Creates and opens a file; returns (node id, handle).
    pub(crate) fn create(&mut self, dir: u64, name: &[u8]) -> (u64, u64) {
        let r = self.call(CREATE, dir, &create_in(libc::O_RDWR, 0o644, name));
        if !r.ok() {
            self.fail(&format!(
                "CREATE {:?} failed: {}",
                String::from_utf8_lossy(name),
                r.errno()
            ));
        }
        (r.nodeid(), u64_at(&r.body, ENTRY_OUT))
    }

    pub(crate) fn size_of(&mut self, id: u64) -> u64 {
        let r = self.call(GETATTR, id, &getattr_in(None));
        assert!(r.ok(), "GETATTR {id}: {}", r.errno());
        u64_at(&r.body, 16 + 8)
    }

    /// Names in directory `dir` (READDIR without a handle).
    pub(crate) fn list(&mut self, dir: u64) -> BTreeSet<Vec<u8>> {
        let mut out = BTreeSet::new();
        let mut off = 0;
        loop {
            let r = self.call(READDIR, dir, &read_in(0, off, 4096));
            assert!(r.ok(), "READDIR {dir}: {}", r.errno());
            let ents = dirents(&r.body);
            let Some(last) = ents.last() else { break };
            off = last.1;
            for (_, _, name) in ents {
                out.insert(name);
            }
        }
        out
    }

    /// Expects an error from `errs`.
    pub(crate) fn expect_err(&mut self, op: u32, nodeid: u64, body: &[u8], errs: &[i32]) -> Reply {
        let r = self.call(op, nodeid, body);
        if !errs.contains(&r.errno()) || r.ok() {
            self.fail(&format!(
                "{} answered {} (body {} bytes); expected one of {errs:?}",
                Self::describe(op, nodeid, body),
                if r.ok() {
                    "success".to_string()
                } else {
                    format!("errno {}", r.errno())
                },
                r.body.len()
            ));
        }
        r
    }

    /// Expects an error (for LOOKUP, a negative entry will do).
    pub(crate) fn expect_no_node(&mut self, op: u32, nodeid: u64, body: &[u8]) -> Reply {
        let r = self.call(op, nodeid, body);
        if r.ok() && (op != LOOKUP || r.nodeid() != 0) {
            self.fail(&format!(
                "{} succeeded (answer {}); expected an error",
                Self::describe(op, nodeid, body),
                hex(&r.body)
            ));
        }
        r
    }
}
