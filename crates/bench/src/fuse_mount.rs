//! Scratch mounts for the benchmarks that go through a real kernel mount:
//! a `uvfs mount` server in a child process, a private tmpfs, a scratch
//! directory, and the server's counters read through `uvfs stat --json`.
//!
//! # Lifetime
//! [`ServerMount::start`] runs this very binary (`current_exe`) as
//! `uvfs mount MNT --foreground ...` and waits until MNT shows up in
//! `/proc/self/mountinfo`. Dropping it (normal return, `?`, or a panic
//! unwinding) sends SIGTERM, on which the server unmounts itself; a server
//! that has not exited after a grace period is lazily unmounted and
//! killed. The child also gets `PR_SET_PDEATHSIG = SIGTERM`, so a benchmark
//! killed with SIGKILL still takes its server, and so its mount, along.
//! Every scratch path carries the benchmark's pid, so a leftover from a
//! crashed run never collides with a new one.
//!
//! # Cold caches without a remount
//! A disk file system is made cold by remounting it. memfs cannot be: its
//! data lives in the server process, so a fresh server is an empty file
//! system. Instead [`drop_kernel_caches`] writes 2 to
//! `/proc/sys/vm/drop_caches`: the kernel evicts every unused dentry and
//! inode, FORGETs every FUSE node it held, and the next walk must LOOKUP
//! (or READDIRPLUS) everything again, while the server keeps its own
//! caches, as after a remount of a server with persistent state. tmpfs is
//! the exception: its dentries are its only copy of the tree, are pinned,
//! and survive; a "cold" tmpfs walk is a warm one.

use crate::cleanup::{self, Leftover};
use crate::procstat;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server gets to come up, and to go down after SIGTERM.
const MOUNT_WAIT: Duration = Duration::from_secs(15);
const EXIT_WAIT: Duration = Duration::from_secs(30);

/// Fails with a clear message unless `/dev/fuse` can be opened.
pub fn check_fuse() -> io::Result<()> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!(
                "/dev/fuse is not usable ({e}): benchmarks through a FUSE mount need the \
                 fuse module loaded and permission to open /dev/fuse (run as root)"
            ),
        )),
    }
}

/// `/tmp/uvfs-bench-<pid>-<tag>`: a scratch path private to this run.
pub fn scratch_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("uvfs-bench-{}-{tag}", std::process::id()))
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
}

/// Whether `/proc/self/mountinfo` text lists a mount on `path`.
pub fn mountinfo_has<T: AsRef<[u8]> + ?Sized>(text: &T, path: &Path) -> bool {
    uvfs_fuse::mountinfo_entries(text).any(|e| e.mountpoint == path)
}

/// Whether something is mounted on `path` (absolute) right now.
pub fn is_mounted(path: &Path) -> io::Result<bool> {
    Ok(mountinfo_has(&std::fs::read("/proc/self/mountinfo")?, path))
}

/// Unmounts `path`, lazily if it is busy; ignores "not mounted".
fn force_unmount(path: &Path) {
    let _ = cleanup::unmount(path);
}

/// Evicts the kernel's unused dentries and inodes (all file systems):
/// `echo 2 > /proc/sys/vm/drop_caches`. Needs root.
pub fn drop_kernel_caches() -> io::Result<()> {
    std::fs::write("/proc/sys/vm/drop_caches", "2\n").map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot drop the kernel's caches (/proc/sys/vm/drop_caches: {e}); cold passes need root"),
        )
    })
}

/// A scratch directory, removed (with its contents when `recursive`) on
/// drop. Never recursive over a mountpoint.
pub struct ScratchDir {
    pub path: PathBuf,
    recursive: bool,
    _leftover: cleanup::Registered,
}

impl ScratchDir {
    pub fn create(path: PathBuf, recursive: bool) -> io::Result<ScratchDir> {
        let _leftover = cleanup::register(if recursive {
            Leftover::Tree(path.clone())
        } else {
            Leftover::Dir(path.clone())
        });
        std::fs::create_dir_all(&path)?;
        Ok(ScratchDir {
            path,
            recursive,
            _leftover,
        })
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = if self.recursive {
            std::fs::remove_dir_all(&self.path)
        } else {
            std::fs::remove_dir(&self.path)
        };
    }
}

/// A private tmpfs for the run; unmounted and removed on drop. Falls back
/// to a directory under `/dev/shm` (also tmpfs) when mounting is refused.
pub struct Tmpfs {
    pub root: PathBuf,
    mounted: bool,
    _leftovers: Vec<cleanup::Registered>,
}

impl Tmpfs {
    pub fn start(tag: &str) -> io::Result<Tmpfs> {
        let dir = scratch_path(tag);
        let mut leftovers = vec![cleanup::register(Leftover::Dir(dir.clone()))];
        std::fs::create_dir_all(&dir)?;
        leftovers.push(cleanup::register(Leftover::Mount(dir.clone())));
        let (src, fstype, opts) = (c"tmpfs", c"tmpfs", c"mode=0755");
        let target = cstr(&dir)?;
        // SAFETY: all four pointers are valid NUL-terminated strings that
        // outlive the call; mount(2) only reads them.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        };
        if r == 0 {
            return Ok(Tmpfs {
                root: dir,
                mounted: true,
                _leftovers: leftovers,
            });
        }
        let e = io::Error::last_os_error();
        let _ = std::fs::remove_dir(&dir);
        drop(leftovers);
        let shm = Path::new("/dev/shm").join(format!("uvfs-bench-{}-{tag}", std::process::id()));
        let leftovers = vec![cleanup::register(Leftover::Tree(shm.clone()))];
        std::fs::create_dir_all(&shm).map_err(|e2| {
            io::Error::new(
                e2.kind(),
                format!("cannot mount a tmpfs ({e}) nor use /dev/shm ({e2})"),
            )
        })?;
        Ok(Tmpfs {
            root: shm,
            mounted: false,
            _leftovers: leftovers,
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if self.mounted {
            force_unmount(&self.root);
            let _ = std::fs::remove_dir(&self.root);
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// The server counters a benchmark compares before and after a pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerSample {
    /// `fuse.requests` (FORGET excluded).
    pub requests: u64,
    /// `fuse.requests.op.*`, by opcode (empty on servers without them).
    pub by_op: BTreeMap<String, u64>,
    /// Server CPU seconds (user + system).
    pub cpu_secs: f64,
    /// `fuse.nodes.forgotten`: settles once a cache drop's FORGETs are in.
    pub forgotten: u64,
    /// `fuse.nodes`: nodes the kernel holds now (a gauge, not a count).
    pub nodes: u64,
}

impl ServerSample {
    /// Reads a `uvfs stat --json` report; `cpu_secs` from `process.cpu_us`
    /// when the server has it (else left 0 for the caller to fill).
    pub fn from_report(v: &Value) -> Option<ServerSample> {
        let c = v.get("counters")?.as_object()?;
        let get = |k: &str| c.get(k).and_then(Value::as_u64);
        let by_op = c
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("fuse.requests.op.")?, v.as_u64()?)))
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        Some(ServerSample {
            requests: get("fuse.requests")?,
            by_op,
            cpu_secs: get("process.cpu_us").map_or(0.0, |us| us as f64 / 1e6),
            forgotten: get("fuse.nodes.forgotten").unwrap_or(0),
            nodes: get("fuse.nodes").unwrap_or(0),
        })
    }

    /// What happened between `self` (before) and `after` (gauges as
    /// `after` has them).
    pub fn delta(&self, after: &ServerSample) -> ServerSample {
        ServerSample {
            requests: after.requests.saturating_sub(self.requests),
            by_op: after
                .by_op
                .iter()
                .map(|(k, v)| {
                    let b = self.by_op.get(k).copied().unwrap_or(0);
                    (k.clone(), v.saturating_sub(b))
                })
                .filter(|(_, v)| *v > 0)
                .collect(),
            cpu_secs: (after.cpu_secs - self.cpu_secs).max(0.0),
            forgotten: after.forgotten.saturating_sub(self.forgotten),
            nodes: after.nodes,
        }
    }
}

/// Whether this `uvfs` binary's `mount --help` lists `flag` (a long
/// option, such as `--no-watch`).
pub fn mount_supports(flag: &str) -> bool {
    let Ok(exe) = std::env::current_exe() else {
        return false;
    };
    cleanup::unblock_in_child(&mut Command::new(exe))
        .args(["mount", "--help"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| help_lists(&String::from_utf8_lossy(&o.stdout), flag))
}

/// Whether clap `--help` text lists the long option `flag` (a whole word:
/// `--no-watch` is not found in `--no-watcher`).
pub fn help_lists(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let next = help[i + flag.len()..].chars().next();
        let prev = help[..i].chars().next_back();
        !next.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
            && !prev.is_some_and(|c| c.is_alphanumeric() || c == '-')
    })
}

/// A server's scratch state, registered for cleanup on a signal
/// (`cleanup.rs`): its mountpoint directory and log from the start, the
/// child and its mount once spawned.
pub struct ServerLeftovers {
    child: Option<cleanup::Registered>,
    rest: Vec<cleanup::Registered>,
}

impl ServerLeftovers {
    /// Registers `mountpoint` (a directory) and `log` (a file), before
    /// either is made.
    pub fn new(mountpoint: &Path, log: &Path) -> ServerLeftovers {
        ServerLeftovers {
            child: None,
            rest: vec![
                cleanup::register(Leftover::Dir(mountpoint.to_path_buf())),
                cleanup::register(Leftover::File(log.to_path_buf())),
            ],
        }
    }

    /// Registers the spawned server and the mount it will make (undone
    /// first: unmount, then SIGTERM, then the directory and the log).
    pub fn spawned(&mut self, pid: u32, mountpoint: &Path) {
        self.child = Some(cleanup::register(Leftover::Child(pid)));
        self.rest
            .push(cleanup::register(Leftover::Mount(mountpoint.to_path_buf())));
    }

    /// Deregisters the child before it is reaped: once reaped, its pid may
    /// be another process's.
    pub fn reaping(&mut self) {
        self.child = None;
    }
}

/// A `uvfs mount --foreground` server in a child process, mounted on a
/// scratch directory; unmounted and reaped on drop.
pub struct ServerMount {
    child: Option<Child>,
    leftovers: ServerLeftovers,
    mountpoint: PathBuf,
    exe: PathBuf,
    /// The server's stderr.
    log: PathBuf,
}

impl ServerMount {
    /// Mounts on `scratch_path(tag)` with `uvfs mount MNT --foreground
    /// <extra>` and waits until the mount is there.
    pub fn start(tag: &str, extra: &[String]) -> io::Result<ServerMount> {
        with_uring_offered(|| Self::start_now(tag, extra))
    }

    /// [`ServerMount::start`] with the kernel's settings left as they are:
    /// FUSE over io_uring only where the machine (or the server itself)
    /// has the kernel offer it, as a user's `uvfs mount` gets.
    pub fn start_as_is(tag: &str, extra: &[String]) -> io::Result<ServerMount> {
        Self::start_now(tag, extra)
    }

    fn start_now(tag: &str, extra: &[String]) -> io::Result<ServerMount> {
        check_fuse()?;
        let exe = std::env::current_exe()?;
        let mountpoint = scratch_path(tag);
        // The server's stderr goes to a file, not a pipe: were this process
        // killed, writes to a pipe would fail (EPIPE) and `eprintln!`
        // panics, which would stop the server's own clean unmount.
        let log = mountpoint.with_extension("log");
        let mut leftovers = ServerLeftovers::new(&mountpoint, &log);
        std::fs::create_dir_all(&mountpoint)?;
        let mut cmd = Command::new(&exe);
        cleanup::unblock_in_child(&mut cmd);
        cmd.arg("mount")
            .arg(&mountpoint)
            .arg("--foreground")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log)?);
        cleanup::dies_with_parent(&mut cmd);
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_file(&log);
                let _ = std::fs::remove_dir(&mountpoint);
                return Err(e);
            }
        };
        leftovers.spawned(child.id(), &mountpoint);
        let mut m = ServerMount {
            child: Some(child),
            leftovers,
            mountpoint,
            exe,
            log,
        };
        let deadline = Instant::now() + MOUNT_WAIT;
        loop {
            if is_mounted(&m.mountpoint)? {
                // A first request waits for the server's INIT reply, so the
                // connection's terms are settled when this returns.
                let _ = statfs_path(&m.mountpoint);
                return Ok(m);
            }
            if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(io::Error::other(format!(
                    "`uvfs mount {}` exited ({status}) before mounting: {}",
                    m.mountpoint.display(),
                    m.log().trim()
                )));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "`uvfs mount {}` did not mount within {MOUNT_WAIT:?}: {}",
                        m.mountpoint.display(),
                        m.log().trim()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Where the file system is mounted.
    pub fn root(&self) -> &Path {
        &self.mountpoint
    }

    /// The server's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the server wrote on stderr so far (its last 4 KiB).
    pub fn log(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        String::from_utf8_lossy(&text[text.len().saturating_sub(4096)..]).into_owned()
    }

    /// The server's report, from `uvfs stat MNT --json` (retried briefly:
    /// the control socket comes up just after the mount).
    pub fn report(&self) -> io::Result<Value> {
        let mut last = String::new();
        for _ in 0..50 {
            let out = cleanup::unblock_in_child(&mut Command::new(&self.exe))
                .arg("stat")
                .arg(&self.mountpoint)
                .arg("--json")
                .stdin(Stdio::null())
                .output()?;
            if out.status.success() {
                return serde_json::from_slice(&out.stdout)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            std::thread::sleep(Duration::from_millis(40));
        }
        Err(io::Error::other(format!("uvfs stat: {}", last.trim())))
    }

    /// Counters now; CPU from `/proc/PID/stat` if the server lacks
    /// `process.cpu_us`.
    pub fn sample(&self) -> io::Result<ServerSample> {
        let v = self.report()?;
        let mut s = ServerSample::from_report(&v).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "uvfs stat: no fuse.requests")
        })?;
        if v.pointer("/counters/process.cpu_us").is_none() {
            if let Some(pid) = self.pid() {
                s.cpu_secs = procstat::process_cpu_secs(pid)?;
            }
        }
        Ok(s)
    }

    /// Waits until the server has taken in the FORGETs of a cache drop
    /// (`fuse.nodes.forgotten` unchanged for 100 ms, at most 10 s).
    pub fn settle(&self) -> io::Result<ServerSample> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut prev = self.sample()?;
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let s = self.sample()?;
            if s.forgotten == prev.forgotten || Instant::now() > deadline {
                return Ok(s);
            }
            prev = s;
        }
    }

    /// Unmounts (the server's own clean path, SIGTERM) and reaps the
    /// server; forces both after a grace period.
    pub fn shutdown(&mut self) -> io::Result<()> {
        match self.child.take() {
            Some(mut child) => {
                self.leftovers.reaping();
                stop_server(
                    &mut child,
                    &self.mountpoint,
                    &self.log,
                    EXIT_WAIT,
                    "uvfs server",
                )
            }
            None => Ok(()),
        }
    }
}

/// Stops a FUSE server we spawned on `mountpoint`: SIGTERM (every server
/// here unmounts on it), then, past `grace`, a forced unmount and SIGKILL;
/// reaps it, makes sure nothing stays mounted, and removes the mountpoint
/// and `log`. An error says the server had to be killed.
pub fn stop_server(
    child: &mut std::process::Child,
    mountpoint: &Path,
    log: &Path,
    grace: Duration,
    what: &str,
) -> io::Result<()> {
    // SAFETY: kill(2) with a pid we spawned and have not reaped (so it
    // cannot have been reused) and a valid signal number.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    let mut exited = false;
    while Instant::now() < deadline {
        if child.try_wait()?.is_some() {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if !exited {
        force_unmount(mountpoint);
        let _ = child.kill();
        let _ = child.wait();
    }
    if is_mounted(mountpoint).unwrap_or(false) {
        force_unmount(mountpoint);
    }
    let _ = std::fs::remove_dir(mountpoint);
    let _ = std::fs::remove_file(log);
    if exited {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{what} on {} did not exit within {grace:?} of SIGTERM; killed",
                mountpoint.display()
            ),
        ))
    }
}

impl Drop for ServerMount {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("uvfs bench: {e}");
        }
    }
}

/// The `fuse` module's switch for FUSE over io_uring.
const URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// Runs `start` (a `uvfs mount` up to its INIT reply) with the kernel
/// offering FUSE over io_uring: if the switch is off and this process may
/// turn it on (root), it is on for the mount's INIT only and then back off.
/// A connection keeps what its INIT agreed, so the server's queues still
/// register afterwards; other FUSE servers mounted meanwhile are offered
/// io_uring too, and use it only if they ask.
fn with_uring_offered<T>(start: impl FnOnce() -> T) -> T {
    let off = std::fs::read_to_string(URING_PARAMETER).is_ok_and(|s| s.trim() == "N");
    let turned_on = off && std::fs::write(URING_PARAMETER, "Y").is_ok();
    let r = start();
    if turned_on {
        let _ = std::fs::write(URING_PARAMETER, "N");
    }
    r
}

/// statfs(2) of `p` (its result is not needed, only that it returned).
fn statfs_path(p: &Path) -> io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid C string and `buf` a writable statfs struct.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut buf) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn help_lists_whole_options() {
        let help = "Options:\n      --source <DIR>  serve DIR\n      --no-watch-x  other\n  -r, --read-only\n";
        assert!(help_lists(help, "--source"));
        assert!(help_lists(help, "--read-only"));
        assert!(!help_lists(help, "--no-watch"), "a longer option is not it");
        assert!(!help_lists(help, "--read"));
        assert!(help_lists("  --no-watch  no watcher", "--no-watch"));
    }

    #[test]
    fn mountinfo_lookup_unescapes() {
        let text = "36 35 98:0 / /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw\n\
                    40 35 0:50 / /tmp/uvfs-bench-1-memfs rw - fuse.memfs uvfs-memfs rw\n";
        assert!(mountinfo_has(text, Path::new("/mnt/a b")));
        assert!(mountinfo_has(text, Path::new("/tmp/uvfs-bench-1-memfs")));
        assert!(!mountinfo_has(text, Path::new("/tmp")));
        // /proc, not /: in a chroot the root is a plain directory, and
        // this function reads /proc, so /proc is mounted wherever it works.
        assert!(is_mounted(Path::new("/proc")).unwrap());
    }

    #[test]
    fn sample_from_report_and_delta() {
        let before = ServerSample::from_report(&json!({"counters": {
            "fuse.requests": 10, "fuse.requests.op.lookup": 4,
            "fuse.requests.op.getattr": 6, "process.cpu_us": 1_000_000,
            "fuse.nodes.forgotten": 3,
        }}))
        .unwrap();
        let after = ServerSample::from_report(&json!({"counters": {
            "fuse.requests": 30, "fuse.requests.op.lookup": 24,
            "fuse.requests.op.getattr": 6, "process.cpu_us": 1_500_000,
            "fuse.nodes.forgotten": 3,
        }}))
        .unwrap();
        let d = before.delta(&after);
        assert_eq!(d.requests, 20);
        assert_eq!(d.by_op.len(), 1, "unchanged opcodes are left out");
        assert_eq!(d.by_op["lookup"], 20);
        assert!((d.cpu_secs - 0.5).abs() < 1e-9);
        // A server without per-op counters or CPU time still samples.
        let old = ServerSample::from_report(&json!({"counters": {"fuse.requests": 1}})).unwrap();
        assert!(old.by_op.is_empty() && old.cpu_secs == 0.0);
        assert!(ServerSample::from_report(&json!({"counters": {}})).is_none());
    }
}
