//! The supervisor process (`BINARY __supervise FD`): holds the mount's
//! connection and journal while its server lives, and starts a new server
//! when it dies.

use super::frame;
use crate::upgrade::predecessor::{parse_reply, Started};
use crate::upgrade::state::{monotonic_ns, ServerState, VERSION};
use crate::upgrade::wire;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

/// Tries at starting a new server before giving the mount up.
const TRIES: u32 = 5;
/// The wait before the second try, doubled before each next one.
const BACKOFF: Duration = Duration::from_millis(200);
/// How long a new server may take to start, then to take over.
const START_LIMIT: Duration = Duration::from_secs(30);
const TAKE_LIMIT: Duration = Duration::from_secs(120);

/// The binary this supervisor runs, held open (`run`).
static OWN_EXE: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();

/// A path that starts the binary this supervisor runs, even if the file
/// it was started from was replaced or removed since.
fn own_exe() -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let f = OWN_EXE.get()?.as_ref()?;
    Some(PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd())))
}

/// What the supervisor holds for the server it watches.
struct Watched {
    sock: UnixStream,
    pid: u32,
    exe: PathBuf,
    base: ServerState,
    dev: OwnedFd,
    fs_fds: Vec<OwnedFd>,
    journal: Option<OwnedFd>,
    /// Kept only for the requests they hold.
    clones: Vec<OwnedFd>,
    /// What the server's file system keeps here (`FdKeeper`).
    kept: HashMap<u64, (Vec<u8>, OwnedFd)>,
    /// What the previous server kept, until this one kept all it holds.
    old_kept: HashMap<u64, (Vec<u8>, OwnedFd)>,
    /// The server, if this process started it (then its exit status is
    /// known).
    child: Option<Child>,
    /// Frames the server sent on its link before it was watched (while
    /// this process waited for it to take the mount over), to be handled
    /// first.
    pending: VecDeque<Frame>,
}

/// A frame of the link: bytes and descriptors.
type Frame = (Bytes, Vec<OwnedFd>);

fn invalid(why: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.into())
}

/// Runs the supervisor on the socket numbered `fd_arg`; `setup` gets the
/// program's own state (the CLI's options, to log where the server logs)
/// once the server said hello.
pub fn run(fd_arg: &str, setup: impl FnOnce(&[u8])) -> std::io::Result<()> {
    let sock = wire::inherited_socket(fd_arg, "server")?;
    // This very binary, held open: it reads the mount's state version
    // whatever is installed at the server's path by the time it dies.
    let _ = OWN_EXE.set(std::fs::File::open("/proc/self/exe").ok());
    // Out of the server's process group: a ^C meant for a foreground
    // server must not take its supervisor too, nor a crash of the group.
    let _ = rustix::process::setsid();
    let (bytes, fds) = wire::recv(&sock)?;
    let mut w = hello(sock, &bytes, fds, None)?;
    setup(&w.base.app);
    log::info!(
        "supervising the server (pid {}) of {}",
        w.pid,
        w.base.mount.mountpoint.display()
    );
    loop {
        let next = match w.pending.pop_front() {
            Some(f) => Ok(f),
            None => wire::recv(&w.sock),
        };
        match next {
            Ok((b, fds)) => match b.first() {
                Some(&frame::HELLO) => {
                    // A successor of a live upgrade linked (or a server
                    // started after a crash): it is the server now.
                    let sock = w.sock.try_clone()?;
                    let dev = w.dev.try_clone()?;
                    let child = w.child.take();
                    let pending = std::mem::take(&mut w.pending);
                    let mut old = std::mem::take(&mut w.kept);
                    old.extend(std::mem::take(&mut w.old_kept));
                    w = hello(sock, &b, fds, Some(dev))?;
                    w.old_kept = old;
                    w.pending = pending;
                    // A server this process started: its status is ours to
                    // read when it dies. One it started that has just
                    // handed the mount to a successor exits now: waited
                    // for aside, or it would stay a zombie until unmount.
                    match child {
                        Some(c) if c.id() == w.pid => w.child = Some(c),
                        Some(mut c) => {
                            let _ = std::thread::Builder::new()
                                .name("uvfs-reap".into())
                                .spawn(move || c.wait());
                        }
                        None => {}
                    }
                    log::info!("supervising the server (pid {})", w.pid);
                }
                Some(&frame::TABLE) => w.journal = fds.into_iter().next(),
                Some(&frame::CLONES) => w.clones = fds,
                Some(&frame::KEEP) if b.len() >= 9 => {
                    let key = u64::from_le_bytes(b[1..9].try_into().expect("8 bytes"));
                    if let Some(fd) = fds.into_iter().next() {
                        w.kept.insert(key, (b[9..].to_vec(), fd));
                    }
                }
                Some(&frame::FORGET) if b.len() >= 9 => {
                    let key = u64::from_le_bytes(b[1..9].try_into().expect("8 bytes"));
                    w.kept.remove(&key);
                    w.old_kept.remove(&key);
                    let mut s = &w.sock;
                    let _ = std::io::Write::write_all(&mut s, &[frame::ACK]);
                }
                Some(&frame::KEPT_ALL) => w.old_kept.clear(),
                Some(&frame::BYE) => {
                    log::info!(
                        "the server (pid {}) left on purpose: supervisor done",
                        w.pid
                    );
                    return Ok(());
                }
                _ => log::warn!("supervisor: unknown frame from the server"),
            },
            Err(e) => {
                if connection_gone(&w.dev) {
                    log::debug!("the mount is gone: supervisor done");
                    return Ok(());
                }
                if e.kind() != std::io::ErrorKind::UnexpectedEof {
                    log::warn!("supervisor: reading the server's link: {e}");
                }
                w = recover(w)?;
            }
        }
    }
}

/// The server's hello: its base state and descriptors (the connection
/// first, `dev` if it is already held, then the file system's).
fn hello(
    sock: UnixStream,
    b: &Bytes,
    mut fds: Vec<OwnedFd>,
    dev: Option<OwnedFd>,
) -> std::io::Result<Watched> {
    if b.len() < 5 || b[0] != frame::HELLO {
        return Err(invalid("the server's first frame is not its hello"));
    }
    let n = u32::from_le_bytes(b[1..5].try_into().expect("4 bytes")) as usize;
    let head: serde_json::Value =
        serde_json::from_slice(b.get(5..5 + n).ok_or_else(|| invalid("short hello"))?)
            .map_err(|e| invalid(format!("hello: {e}")))?;
    let base = ServerState::decode(&b.slice(5 + n..))?;
    if fds.is_empty() {
        return Err(invalid("hello without the connection"));
    }
    let sent_dev = fds.remove(0);
    Ok(Watched {
        sock,
        pid: head.get("pid").and_then(|p| p.as_u64()).unwrap_or(0) as u32,
        exe: head
            .get("exe")
            .and_then(|e| e.as_str())
            .map(PathBuf::from)
            .ok_or_else(|| invalid("hello names no binary"))?,
        base,
        dev: dev.unwrap_or(sent_dev),
        fs_fds: fds,
        journal: None,
        clones: Vec::new(),
        kept: HashMap::new(),
        old_kept: HashMap::new(),
        child: None,
        pending: VecDeque::new(),
    })
}

/// Whether the connection ended (unmounted or aborted): `/dev/fuse`
/// polls as an error then.
fn connection_gone(dev: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut p = [PollFd::new(dev, PollFlags::IN)];
    match poll(&mut p, Some(&rustix::event::Timespec::default())) {
        Ok(_) => p[0].revents().contains(PollFlags::ERR),
        Err(_) => true,
    }
}

/// Why the server is gone, as far as this process can tell.
fn cause(w: &mut Watched) -> String {
    match w.child.as_mut().map(|c| c.wait()) {
        Some(Ok(s)) => format!("it exited: {s}"),
        _ => "it ended without handing the mount over".into(),
    }
}

/// Starts a new server for the mount `w` watched, trying again with
/// backoff; returns what to watch next, or gives up (this process then
/// exits and the connection ends with it).
fn recover(mut w: Watched) -> std::io::Result<Watched> {
    let died_ns = monotonic_ns();
    let mnt = w.base.mount.mountpoint.clone();
    let why = cause(&mut w);
    log::error!(
        "the server (pid {}) of {} died ({why}); starting a new one",
        w.pid,
        mnt.display()
    );
    let Some(journal) = w.journal.take() else {
        return Err(invalid("the server died before giving its journal"));
    };
    // Whatever the dead server and its predecessor kept: the successor
    // takes it and keeps again what it still holds.
    let old = std::mem::take(&mut w.old_kept);
    for (k, v) in old {
        w.kept.entry(k).or_insert(v);
    }
    let mut wait = BACKOFF;
    let mut exe = w.exe.clone();
    for attempt in 1..=TRIES {
        match start(&w, &exe, &journal, died_ns) {
            Ok((started, sock, pause_us, early)) => {
                log::info!(
                    "recovered {}: new server pid {} (generation {}), requests waited {} us",
                    mnt.display(),
                    started.pid(),
                    w.base.generation + 1,
                    pause_us
                );
                let pid = started.pid();
                let child = started.keep();
                // The new server says hello on the new link; until then the
                // old journal and clones are what there is.
                let mut next = Watched {
                    sock,
                    pid,
                    exe: w.exe.clone(),
                    base: w.base.clone(),
                    dev: w.dev,
                    fs_fds: w.fs_fds,
                    journal: Some(journal),
                    clones: w.clones,
                    kept: HashMap::new(),
                    old_kept: w.kept,
                    child,
                    pending: early.into(),
                };
                next.base.generation += 1;
                next.base.restarts += 1;
                return Ok(next);
            }
            Err(e) => {
                log::error!(
                    "recovering {} (try {attempt} of {TRIES}): {e}",
                    mnt.display()
                );
                // The binary at the server's path is gone or speaks
                // another state version (another uvfs was installed since
                // the mount): the one this process runs speaks the mount's
                // (it read its state), so it serves until an upgrade.
                let replaced = matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::Unsupported
                );
                if let (true, true, Some(own)) = (replaced, exe == w.exe, own_exe()) {
                    log::warn!(
                        "starting the binary the mount's supervisor runs instead of {}",
                        w.exe.display()
                    );
                    exe = own;
                    continue;
                }
                if attempt < TRIES {
                    std::thread::sleep(wait);
                    wait *= 2;
                }
            }
        }
    }
    log::error!(
        "giving {} up after {TRIES} tries: its requests fail from now on (ENOTCONN); \
         unmount it",
        mnt.display()
    );
    Err(std::io::Error::other("no server could take the mount over"))
}

/// One try: a successor started, given the state, taken over; the
/// frames it sent on its link meanwhile.
fn start(
    w: &Watched,
    exe: &std::path::Path,
    journal: &OwnedFd,
    died_ns: u64,
) -> std::io::Result<(Started, UnixStream, u64, Vec<Frame>)> {
    let mut child = Started::spawn(exe)?;
    let hello = parse_reply(&child.recv(START_LIMIT, "at start")?)?;
    let theirs = hello.get("state_version").and_then(|v| v.as_u64());
    if !crate::upgrade::state::reads_ours(&hello) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!(
                "{} reads server state version {theirs:?}, this mount's is {VERSION}",
                exe.display()
            ),
        ));
    }
    let mut state = w.base.clone();
    state.journal = true;
    state.link = true;
    state.generation += 1;
    state.restarts += 1;
    state.parked_at_ns = died_ns;
    state.fs_fds = w.fs_fds.len() as u32;
    let (mine, theirs) = UnixStream::pair()?;
    let mut fds = vec![w.dev.try_clone()?];
    for f in &w.fs_fds {
        fds.push(f.try_clone()?);
    }
    state.kept = Vec::with_capacity(w.kept.len());
    for (key, (meta, fd)) in &w.kept {
        state.kept.push((*key, meta.clone()));
        fds.push(fd.try_clone()?);
    }
    fds.push(journal.try_clone()?);
    fds.push(OwnedFd::from(theirs));
    wire::send(child.sock(), &state.encode()?, &wire::borrow_all(&fds))?;
    drop(fds);
    let taking = parse_reply(&child.recv(TAKE_LIMIT, "while taking the state over")?)?;
    if taking.get("taking").is_none() {
        return Err(invalid("the new server's reply is not this build's"));
    }
    let (done, early) = until_done(&mut child, &mine)?;
    let pause = done.get("pause_us").and_then(|p| p.as_u64()).unwrap_or(0);
    Ok((child, mine, pause, early))
}

/// Waits for a new server that took the connection to say it is done,
/// reading what it sends on its new link meanwhile: it links (its hello,
/// journal, a frame per kept description) before it says so, and frames
/// beyond the link's buffer would otherwise wait forever for this
/// process, which would wait for "done". (No frame of that phase wants
/// an answer: a kept description is taken back only while requests are
/// served, after "done".)
fn until_done(
    child: &mut Started,
    link: &UnixStream,
) -> std::io::Result<(serde_json::Value, Vec<Frame>)> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let deadline = std::time::Instant::now() + TAKE_LIMIT;
    let mut early = Vec::new();
    let mut link_open = true;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ready = |f: PollFlags| f.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR);
        let (reply, more) = if link_open {
            let mut p = [
                PollFd::new(child.sock(), PollFlags::IN),
                PollFd::new(link, PollFlags::IN),
            ];
            let t = Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            match poll(&mut p, Some(&t)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            (ready(p[0].revents()), ready(p[1].revents()))
        } else {
            (true, false)
        };
        if more {
            match wire::recv(link) {
                Ok(f) => early.push(f),
                // Closed: the server is dying; its reply says how.
                Err(_) => link_open = false,
            }
        }
        if reply || left.is_zero() {
            let b = child.recv(
                left.max(Duration::from_millis(1)),
                "after taking the connection",
            )?;
            return Ok((parse_reply(&b)?, early));
        }
    }
}
