//! `fbr-passthrough SOURCE MOUNTPOINT [--threads N] [--timeout SECS] [--file-handles]`
//!
//! fuse-backend-rs's `PassthroughFs` over `/dev/fuse`, as its own example
//! daemon serves it (default configuration, one `FuseChannel` per worker
//! thread), so `uvfs bench fuse-stat` can compare uvfs's passthrough with
//! it. It is a peer, not a product: it stays in the foreground and runs until
//! the mount goes away (`umount MOUNTPOINT`) or it gets SIGTERM, SIGINT or
//! SIGHUP, on which it unmounts and exits 0.
//!
//! `--timeout` sets the entry and attribute timeouts (default: the crate's
//! own, `Config::default()`'s, which is what an embedder that sets none
//! gets), `--threads` the request loops (default: the number of CPUs, at
//! least 2, as `uvfs mount`), `--file-handles` has it keep a file handle per
//! inode instead of an `O_PATH` fd (`Config::inode_file_handles`), so the
//! fds it holds do not grow with the inodes the kernel knows.

use fuse_backend_rs::api::server::Server;
use fuse_backend_rs::passthrough::{Config, PassthroughFs};
use fuse_backend_rs::transport::{FuseChannel, FuseSession};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

type Fs = PassthroughFs<()>;

struct Args {
    source: PathBuf,
    mountpoint: PathBuf,
    threads: usize,
    /// `None`: the crate's default.
    timeout: Option<Duration>,
    file_handles: bool,
}

const USAGE: &str =
    "usage: fbr-passthrough SOURCE MOUNTPOINT [--threads N] [--timeout SECS] [--file-handles]";

fn parse_args() -> Result<Args, String> {
    let mut pos = Vec::new();
    let mut threads = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    let mut timeout = None;
    let mut file_handles = false;
    let mut it = std::env::args_os().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .and_then(|v| v.into_string().ok())
                .ok_or(format!("{name} needs a value"))
        };
        match a.to_str() {
            Some("--threads") => {
                threads = value("--threads")?
                    .parse::<usize>()
                    .map_err(|e| format!("--threads: {e}"))?
                    .max(1);
            }
            Some("--timeout") => {
                let secs: f64 = value("--timeout")?
                    .parse()
                    .map_err(|e| format!("--timeout: {e}"))?;
                timeout =
                    Some(Duration::try_from_secs_f64(secs).map_err(|e| format!("--timeout: {e}"))?);
            }
            Some("--file-handles") => file_handles = true,
            Some("-h" | "--help") => return Err(USAGE.into()),
            _ => pos.push(PathBuf::from(a)),
        }
    }
    let [source, mountpoint] = <[PathBuf; 2]>::try_from(pos).map_err(|_| USAGE.to_string())?;
    Ok(Args {
        source,
        mountpoint,
        threads,
        timeout,
        file_handles,
    })
}

/// Why the main thread wakes up: a signal, or a request loop that ended
/// (the file system was unmounted from outside, or the channel failed).
enum Event {
    Signal(libc::c_int),
    LoopEnded,
}

/// Blocks the termination signals in this thread and every thread spawned
/// after it, so only [`wait_for_signal`] receives them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a sigset_t we own;
    // pthread_sigmask reads it and changes only this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_for_signal(set: &libc::sigset_t) -> libc::c_int {
    let mut sig = 0;
    // SAFETY: `set` is an initialised sigset_t and `sig` a valid out pointer.
    while unsafe { libc::sigwait(set, &mut sig) } != 0 {}
    sig
}

/// Serves requests from one channel until the session ends. Errors are
/// printed unless `stopping` (once unmounted, the channel reports EPOLLERR).
fn serve(server: &Server<Arc<Fs>>, mut ch: FuseChannel, stopping: &AtomicBool) {
    loop {
        match ch.get_request() {
            Ok(Some((reader, writer))) => {
                if let Err(e) = server.handle_message(reader, writer.into(), None, None) {
                    // The reply could not be written: the connection is
                    // gone (unmounted or aborted).
                    if let fuse_backend_rs::Error::EncodeMessage(_) = e {
                        return;
                    }
                    eprintln!("fbr-passthrough: request failed: {e}");
                }
            }
            // Unmounted, or woken by FuseSession::wake.
            Ok(None) => return,
            Err(e) => {
                if !stopping.load(Ordering::Relaxed) {
                    // Also how an unmount from outside shows (EPOLLERR).
                    eprintln!("fbr-passthrough: channel closed: {e}");
                }
                return;
            }
        }
    }
}

fn run(a: Args) -> Result<(), String> {
    // PassthroughFs opens the source only on FUSE_INIT, after the mount:
    // check it first so a bad SOURCE fails here, not in a dead mount.
    if !std::fs::metadata(&a.source).is_ok_and(|m| m.is_dir()) {
        return Err(format!("{:?} is not a directory", a.source));
    }
    let signals = block_signals();
    let defaults = Config::default();
    let cfg = Config {
        root_dir: a
            .source
            .to_str()
            .ok_or("SOURCE must be valid UTF-8")?
            .to_string(),
        entry_timeout: a.timeout.unwrap_or(defaults.entry_timeout),
        attr_timeout: a.timeout.unwrap_or(defaults.attr_timeout),
        inode_file_handles: a.file_handles,
        ..defaults
    };
    let fs = Fs::new(cfg).map_err(|e| format!("passthrough over {:?}: {e}", a.source))?;
    let server = Arc::new(Server::new(Arc::new(fs)));
    let mut session = FuseSession::new(&a.mountpoint, "fbr-passthrough", "", false)
        .map_err(|e| format!("session: {e}"))?;
    session.mount().map_err(|e| format!("mount: {e}"))?;

    let (tx, rx) = mpsc::channel();
    let stopping = Arc::new(AtomicBool::new(false));
    let mut loops = Vec::with_capacity(a.threads);
    for i in 0..a.threads {
        let ch = session.new_channel().map_err(|e| format!("channel: {e}"))?;
        let (server, tx, stopping) = (server.clone(), tx.clone(), stopping.clone());
        let h = std::thread::Builder::new()
            .name(format!("fbr-loop-{i}"))
            .spawn(move || {
                serve(&server, ch, &stopping);
                let _ = tx.send(Event::LoopEnded);
            })
            .map_err(|e| format!("spawn: {e}"))?;
        loops.push(h);
    }
    // Detached: it blocks in sigwait until a signal, which may never come.
    std::thread::spawn(move || {
        let _ = tx.send(Event::Signal(wait_for_signal(&signals)));
    });

    if let Ok(Event::Signal(sig)) = rx.recv() {
        eprintln!("fbr-passthrough: signal {sig}, unmounting");
    }
    // Unmount (a no-op error when it is already gone) and wake every loop.
    stopping.store(true, Ordering::Relaxed);
    let _ = session.umount();
    let _ = session.wake();
    for h in loops {
        let _ = h.join();
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse_args().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fbr-passthrough: {e}");
            ExitCode::FAILURE
        }
    }
}
