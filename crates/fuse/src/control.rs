//! The control socket through which `uvfs stat` reads a running server.
//!
//! # Where
//! `<hash>.sock` in the server's runtime directory (`rundir.rs`:
//! `/run/uvfs` for root, `$XDG_RUNTIME_DIR/uvfs` or `/tmp/uvfs-UID` for
//! other users), where `<hash>` is the FNV-1a hash of the mountpoint's
//! absolute path (parent canonicalised, the mountpoint itself not touched,
//! so a dead server's mountpoint still maps to its socket). The socket is
//! mode 0600: the statistics are the server owner's.
//!
//! # Protocol
//! The client sends one line, `stats` or `check` (see `stats.rs`),
//! `upgrade` (`upgrade/`) or `remounted` (`notify_remounted`), and reads
//! one JSON object until end of file.

use crate::server::Inner;
use crate::stats;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The mountpoint as an absolute path without touching the mountpoint
/// itself (a dead FUSE mount answers ENOTCONN to stat).
pub fn normalize_mountpoint(p: &Path) -> std::io::Result<PathBuf> {
    let abs = std::path::absolute(p)?;
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => Ok(parent.canonicalize()?.join(name)),
        _ => Ok(abs),
    }
}

/// The control socket's file name for a mountpoint.
fn socket_name(mountpoint: &Path) -> std::io::Result<String> {
    let mp = normalize_mountpoint(mountpoint)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in mp.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Ok(format!("{h:016x}.sock"))
}

/// Where this user's server of `mountpoint` may have its control socket,
/// preferred first (a server started from another kind of shell, with or
/// without `XDG_RUNTIME_DIR`, used the other), in directories this user
/// can trust only. For root, also where the server of the user who owns
/// the mount (its `user_id=`) keeps it, if private to that user: an
/// administrator reads any user's mount.
pub fn socket_paths(mountpoint: &Path) -> std::io::Result<Vec<PathBuf>> {
    let name = socket_name(mountpoint)?;
    let mut dirs: Vec<PathBuf> = crate::rundir::lookup_dirs()
        .into_iter()
        .filter(|d| crate::rundir::trusted_here(d))
        .collect();
    if crate::rundir::is_root() {
        let owner = crate::mountinfo::owner_of(&normalize_mountpoint(mountpoint)?);
        if let Some(uid) = owner.filter(|&u| u != 0) {
            dirs.extend(
                crate::rundir::dirs_of(uid)
                    .into_iter()
                    .filter(|d| crate::rundir::trusted(d, uid)),
            );
        }
    }
    Ok(dirs.into_iter().map(|d| d.join(&name)).collect())
}

/// The log of a detached server of `mountpoint` on a machine with no
/// system log: beside its control socket, in this user's runtime
/// directory (made if missing).
pub fn fallback_log_path(mountpoint: &Path) -> std::io::Result<PathBuf> {
    let dir = crate::rundir::create()?;
    Ok(dir.join(socket_name(mountpoint)?).with_extension("log"))
}

/// Whether a server answers on the control socket of `mountpoint`.
pub fn answers(mountpoint: &Path) -> bool {
    socket_paths(mountpoint).is_ok_and(|v| v.iter().any(|p| UnixStream::connect(p).is_ok()))
}

/// The process answering `mountpoint`'s control socket (its server): its
/// pid and a pidfd; `None` if none answers or pidfds are missing. The
/// server holds the mount's source open until it exits, a moment after
/// the unmount: until then an unmount of the source's own file system is
/// refused (EBUSY).
pub fn server_process(mountpoint: &Path) -> Option<(i32, std::os::fd::OwnedFd)> {
    let s = socket_paths(mountpoint)
        .ok()?
        .iter()
        .find_map(|p| UnixStream::connect(p).ok())?;
    let cred = rustix::net::sockopt::socket_peercred(&s).ok()?;
    let pidfd = rustix::process::pidfd_open(cred.pid, rustix::process::PidfdFlags::empty()).ok()?;
    Some((cred.pid.as_raw_nonzero().get(), pidfd))
}

/// Waits until the process of `pidfd` has exited, for at most `limit`;
/// whether it has.
pub fn exited_within(pidfd: &std::os::fd::OwnedFd, limit: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let t = Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as i64,
        };
        // A pidfd polls readable once its process has exited.
        let mut p = [PollFd::new(pidfd, PollFlags::IN)];
        match poll(&mut p, Some(&t)) {
            Err(rustix::io::Errno::INTR) => continue,
            Ok(n) => return n > 0,
            Err(_) => return false,
        }
    }
}

/// A listening control socket; removes its file when dropped, unless a
/// successor took it over (`upgrade/`).
pub struct ControlSocket {
    path: PathBuf,
    /// The inode of the socket file this server bound: what it removes
    /// on its way out, and only that (a later server of the mountpoint
    /// may have replaced it: `bind_replacing`).
    ino: Option<u64>,
    inner: Arc<Inner>,
}

impl ControlSocket {
    /// Binds the socket for `mountpoint` and serves it on a thread. With
    /// `take_over`, the socket of the server this one replaces is
    /// replaced at once (that server is leaving).
    /// `upgradable`: what `upgrade` requests need (none: refused).
    pub fn start(
        inner: Arc<Inner>,
        mountpoint: &Path,
        take_over: bool,
        upgradable: Option<Arc<crate::upgrade::Upgradable>>,
    ) -> std::io::Result<ControlSocket> {
        let dir = crate::rundir::create()?;
        sweep_stale(&dir, STALE_AGE);
        let path = dir.join(socket_name(mountpoint)?);
        if take_over {
            let _ = std::fs::remove_file(&path);
        }
        let listener = bind_replacing(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let ino = socket_ino(&path);
        let mp = normalize_mountpoint(mountpoint)?.display().to_string();
        let served = inner.clone();
        std::thread::Builder::new()
            .name("uvfs-control".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    let _ = serve_one(&served, upgradable.as_deref(), &mp, conn);
                    if served
                        .lineage
                        .handed_over
                        .load(std::sync::atomic::Ordering::SeqCst)
                    {
                        break;
                    }
                }
            })?;
        Ok(ControlSocket { path, ino, inner })
    }

    /// Whether this server handed its mount to a successor.
    pub fn handed_over(&self) -> bool {
        self.inner
            .lineage
            .handed_over
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Binds `path`, replacing a socket nobody answers on (left by a killed
/// server). A socket that still answers belongs to a server of the same
/// mountpoint that was just unmounted and is on its way out (the kernel
/// unmounts before the server sees ENODEV and exits): wait for it to go,
/// for up to five seconds, instead of failing the new mount. One still
/// answering then serves on where the file system stays mounted (a copy
/// in another mount namespace, which `uvfs umount` reported), not here:
/// the name goes to the new server, the one `uvfs stat` and `uvfs umount`
/// of this mountpoint mean, and the old one keeps serving its copy.
fn bind_replacing(path: &Path) -> std::io::Result<UnixListener> {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if path.exists() && UnixStream::connect(path).is_err() {
            let _ = std::fs::remove_file(path);
        }
        match UnixListener::bind(path) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if std::time::Instant::now() >= deadline {
                    log::warn!(
                        "{}: the server of an earlier mount here still runs 5 s after its \
                         unmount (serving a copy of it elsewhere, a bind mount or another \
                         mount namespace); this server takes the control socket's name",
                        path.display()
                    );
                    let _ = std::fs::remove_file(path);
                    return UnixListener::bind(path);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// The inode of the socket file at `path`, if there is one.
fn socket_ino(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| m.ino())
}

/// How old a socket nobody listens on must be before a new server
/// removes it: a server binds its socket a moment before it listens, and
/// a younger one may be that moment.
const STALE_AGE: Duration = Duration::from_secs(10);

/// Removes the sockets in `dir` of servers that are gone (killed with
/// SIGKILL, say, which leaves no time to remove them): nothing listens on
/// them (ECONNREFUSED) and they are older than `min_age`. Without this
/// they would stay until a mount at the same path replaced them.
fn sweep_stale(dir: &Path, min_age: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "sock") {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|a| a >= min_age));
        let refused = matches!(
            UnixStream::connect(&path),
            Err(ref err) if err.kind() == std::io::ErrorKind::ConnectionRefused
        );
        if old && refused {
            let _ = std::fs::remove_file(&path);
        }
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        // Only its own: a successor (`upgrade/`) or a later server of the
        // mountpoint (`bind_replacing`) may have put its own there.
        if !self.handed_over() && self.ino.is_some() && socket_ino(&self.path) == self.ino {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Longest request line (`upgrade` and a binary's path).
const MAX_REQUEST: u64 = 4096 + 16;

fn serve_one(
    inner: &Inner,
    upgradable: Option<&crate::upgrade::Upgradable>,
    mp: &str,
    conn: UnixStream,
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(&conn)
        .take(MAX_REQUEST)
        .read_line(&mut line)?;
    if line.is_empty() {
        // Connected and gone without asking (`answers`, `sweep_stale`):
        // no report to build.
        return Ok(());
    }
    if let Some(rest) = line.trim_end_matches('\n').strip_prefix("upgrade") {
        let binary = Some(rest.trim())
            .filter(|b| !b.is_empty())
            .map(PathBuf::from);
        let mut written = Ok(());
        crate::upgrade::upgrade(inner, upgradable, binary, &mut |r| {
            let v = match r {
                Ok(r) => serde_json::json!({
                    "ok": true,
                    "pid": r.pid,
                    "generation": r.generation,
                    "pause_us": r.pause_us,
                    "nodes": r.nodes,
                    "handles": r.handles,
                }),
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            };
            let mut w = &conn;
            written = w
                .write_all(format!("{v}\n").as_bytes())
                .and_then(|()| conn.shutdown(std::net::Shutdown::Write));
        });
        return written;
    }
    if line.trim() == "remounted" {
        // Nothing in the request is trusted: the flags are the kernel's.
        let v = match crate::mountinfo::flags_of(Path::new(mp)) {
            Some(flags) => {
                // A read-only server stays so when its mount is made
                // writable (it refuses every change, atimes included).
                let flags = flags | if inner.read_only { libc::MS_RDONLY } else { 0 };
                inner.fs.remounted(flags);
                serde_json::json!({ "ok": true, "flags": flags })
            }
            None => {
                serde_json::json!({ "error": format!("{mp} is not in this server's mountinfo") })
            }
        };
        let mut w = &conn;
        return w.write_all(format!("{v}\n").as_bytes());
    }
    let check = line.trim() == "check";
    let v = stats::report(inner, mp, check);
    let mut w = &conn;
    w.write_all(v.to_string().as_bytes())?;
    w.write_all(b"\n")
}

/// Asks the server of `mountpoint` to hand its mount to a successor
/// started from `binary` (default: the binary it was started from);
/// returns the server's answer (`ok` with the successor's pid,
/// generation and pause, or `error`).
pub fn request_upgrade(
    mountpoint: &Path,
    binary: Option<&Path>,
) -> std::io::Result<serde_json::Value> {
    let line = match binary {
        Some(b) => format!("upgrade {}\n", std::path::absolute(b)?.display()),
        None => "upgrade\n".into(),
    };
    let buf = ask(mountpoint, &line, Duration::from_secs(300))?;
    serde_json::from_str(&buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Sends `line` to the server of `mountpoint` and reads its whole answer.
/// A request left waiting in a server's queue when that server handed
/// the mount over (an upgrade running, or two asked at once) is reset
/// unread, and asked again of the successor, which binds the socket anew.
fn ask(mountpoint: &Path, line: &str, limit: Duration) -> std::io::Result<String> {
    let mut tries = 0;
    loop {
        let mut s = connect(mountpoint)?;
        s.set_read_timeout(Some(limit))?;
        let mut buf = String::new();
        let r = s
            .write_all(line.as_bytes())
            .and_then(|()| s.read_to_string(&mut buf));
        let unread = match &r {
            Ok(_) => buf.is_empty(),
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
        };
        tries += 1;
        if !unread || tries == 5 {
            return match r {
                Ok(_) if buf.is_empty() => Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "the server closed the connection without an answer",
                )),
                Ok(_) => Ok(buf),
                Err(e) => Err(e),
            };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Tells the server of `mountpoint` that the mount's flags changed
/// (`mount -o remount`), which the kernel does not: the server reads them
/// from the kernel and applies the atime flags (`FileSystem::remounted`).
/// Returns once it has.
pub fn notify_remounted(mountpoint: &Path) -> std::io::Result<()> {
    let buf = ask(mountpoint, "remounted\n", Duration::from_secs(30))?;
    let v: serde_json::Value = serde_json::from_str(&buf)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    match v.get("error").and_then(|e| e.as_str()) {
        Some(e) => Err(std::io::Error::other(e.to_string())),
        None => Ok(()),
    }
}

/// Asks the server of `mountpoint` for its report (`check` purges the
/// mount's name cache first to verify vnode accounting).
pub fn query(mountpoint: &Path, check: bool) -> std::io::Result<serde_json::Value> {
    let line = if check { "check\n" } else { "stats\n" };
    let buf = ask(mountpoint, line, Duration::from_secs(30))?;
    serde_json::from_str(&buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// A connection to the control socket of this user's server of
/// `mountpoint`.
fn connect(mountpoint: &Path) -> std::io::Result<UnixStream> {
    let paths = socket_paths(mountpoint)?;
    let deadline = std::time::Instant::now() + REFUSED_FOR;
    loop {
        let mut first_err = None;
        for p in &paths {
            match UnixStream::connect(p) {
                Ok(s) => return Ok(s),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let e = first_err.unwrap_or_else(|| std::io::ErrorKind::NotFound.into());
        // A socket nobody listens on, of a mount still there: its server
        // died and a supervisor is starting the next (milliseconds), or
        // a successor is binding it anew.
        let refused = e.kind() == std::io::ErrorKind::ConnectionRefused;
        if !refused
            || std::time::Instant::now() >= deadline
            || crate::mountinfo::mount_entry(&normalize_mountpoint(mountpoint)?).is_none()
        {
            return Err(no_server(mountpoint, &paths, e));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How long a refused control socket of a mount still there is tried
/// again (a supervisor's new server answers within tens of milliseconds).
const REFUSED_FOR: Duration = Duration::from_secs(3);

/// Why no server answered for `mountpoint` (its sockets `looked`, the
/// first error `e`), in the terms of what is mounted there.
fn no_server(mountpoint: &Path, looked: &[PathBuf], e: std::io::Error) -> std::io::Error {
    let at = normalize_mountpoint(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let shown = mountpoint.display();
    let entry = crate::mountinfo::mount_entry(&at);
    let me = rustix::process::getuid().as_raw();
    let why = match (&entry, crate::mountinfo::owner_of(&at)) {
        (None, _) => format!("nothing is mounted on {shown}"),
        (Some(m), _) if !m.fstype.starts_with("fuse.uvfs") && m.fstype != "fuse" => {
            format!("{shown} is a {} mount, not a uvfs one", m.fstype)
        }
        (Some(_), Some(uid)) if uid != me => format!(
            "{shown} is served by user {uid}'s uvfs server: only that user (or root) may \
             reach it"
        ),
        _ if e.kind() == std::io::ErrorKind::ConnectionRefused => format!(
            "the uvfs server of {shown} does not answer ({e}): it has died, and no \
             supervisor started another"
        ),
        _ => {
            let looked: Vec<String> = looked.iter().map(|p| p.display().to_string()).collect();
            format!(
                "no uvfs server of this user for {shown} (looked for {}): {e}",
                if looked.is_empty() {
                    "a control socket in a runtime directory this user trusts".to_string()
                } else {
                    looked.join(", ")
                }
            )
        }
    };
    std::io::Error::new(e.kind(), why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_sockets_nobody_listens_on_are_swept() {
        let dir = std::env::temp_dir().join(format!("uvfs-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A live server's socket, a dead one's, and a file that is not a
        // socket of ours.
        let live = UnixListener::bind(dir.join("live.sock")).unwrap();
        drop(UnixListener::bind(dir.join("dead.sock")).unwrap());
        std::fs::write(dir.join("other.txt"), b"").unwrap();
        // Young: kept, whatever answers.
        sweep_stale(&dir, Duration::from_secs(3600));
        assert!(dir.join("dead.sock").exists());
        sweep_stale(&dir, Duration::ZERO);
        assert!(
            !dir.join("dead.sock").exists(),
            "a dead server's socket stayed"
        );
        assert!(
            dir.join("live.sock").exists(),
            "a live server's socket went"
        );
        assert!(dir.join("other.txt").exists());
        drop(live);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
