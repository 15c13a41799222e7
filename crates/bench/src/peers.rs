//! Other FUSE passthrough servers to hold uvfs's passthrough against, run
//! over the same source directory:
//!
//! * `libfuse-passthrough_ll`: libfuse's low-level passthrough example
//!   (Debian's libfuse3-dev ships its source), the reference design: one
//!   `O_PATH` fd per inode the kernel knows, multi-threaded loop with a
//!   cloned `/dev/fuse` fd per thread.
//! * `fuse-backend-rs`: the `PassthroughFs` of the fuse-backend-rs crate
//!   (Cloud Hypervisor, Kata, nydus), behind a small main in
//!   `peers/fbr-passthrough`; also one `O_PATH` fd per inode by default.
//! * `fuse-backend-rs-fh`: the same with `inode_file_handles`: a file handle
//!   per inode instead of an fd, opened by handle when needed.
//! * `go-fuse-loopback`: go-fuse's loopback file system (`fs.NewLoopbackRoot`
//!   served by `fs.Mount`, as go-fuse's `example/loopback`), behind a small
//!   main in `peers/gofuse-loopback`.
//!
//! A peer runs either at given timeouts ([`PeerOptions::timeout_secs`]) or
//! at its own defaults, what a user who types no option gets
//! ([`PeerKind::default_timeout_secs`]).
//!
//! All are compiled by `scripts/build-peers.sh` into
//! `<cargo target dir>/peers/`; [`PeerMount::start`] runs the script when
//! the binary is missing, so a benchmark needs no separate step.
//!
//! # Lifetime
//! As for `uvfs mount` servers (`fuse_mount.rs`): the server runs in the
//! foreground in a child process with `PR_SET_PDEATHSIG = SIGTERM` (so a
//! benchmark killed with SIGKILL takes its peers along; note the signal
//! comes when the *thread* that started the peer exits), on a scratch
//! mountpoint named after this process's pid; dropping the [`PeerMount`]
//! asks it to unmount (SIGTERM), and if it has not exited after a grace
//! period, unmounts lazily, kills and reaps it, then removes the
//! mountpoint.

use crate::fuse_mount::{self, scratch_path};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a peer gets to mount, and to exit after SIGTERM.
const MOUNT_WAIT: Duration = Duration::from_secs(15);
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// The entry and attribute timeout [`PeerMount::start`] gives a peer: the
/// one the benchmarks give uvfs by default (`--timeout 60`), so the kernel
/// may cache names and attributes as long for every server.
pub const DEFAULT_TIMEOUT_SECS: f64 = 60.0;

/// A peer server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKind {
    LibfusePassthroughLl,
    FuseBackendRs,
    FuseBackendRsFh,
    GoFuseLoopback,
}

impl PeerKind {
    /// Every peer, in the order benchmarks run them.
    pub const ALL: [PeerKind; 4] = [
        PeerKind::LibfusePassthroughLl,
        PeerKind::FuseBackendRs,
        PeerKind::FuseBackendRsFh,
        PeerKind::GoFuseLoopback,
    ];

    /// The name rows and `--fs` use.
    pub const fn name(&self) -> &'static str {
        match self {
            PeerKind::LibfusePassthroughLl => "libfuse-passthrough_ll",
            PeerKind::FuseBackendRs => "fuse-backend-rs",
            PeerKind::FuseBackendRsFh => "fuse-backend-rs-fh",
            PeerKind::GoFuseLoopback => "go-fuse-loopback",
        }
    }

    /// The entry and attribute timeout the peer gives the kernel when run
    /// without one: libfuse's `passthrough_ll` 1 s (its `cache=auto`),
    /// fuse-backend-rs's `Config::default()` 5 s, go-fuse's
    /// `example/loopback` 1 s.
    pub const fn default_timeout_secs(&self) -> f64 {
        match self {
            PeerKind::LibfusePassthroughLl | PeerKind::GoFuseLoopback => 1.0,
            PeerKind::FuseBackendRs | PeerKind::FuseBackendRsFh => 5.0,
        }
    }

    /// The peer called `name` (see [`PeerKind::name`]).
    pub fn from_name(name: &str) -> Option<PeerKind> {
        PeerKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Its binary under `<target dir>/peers/` (also what
    /// `scripts/build-peers.sh` takes to build just this one).
    pub fn binary(&self) -> &'static str {
        match self {
            PeerKind::LibfusePassthroughLl => "passthrough_ll",
            PeerKind::FuseBackendRs | PeerKind::FuseBackendRsFh => "fbr-passthrough",
            PeerKind::GoFuseLoopback => "gofuse-loopback",
        }
    }

    /// The command line serving `source` on `mountpoint`.
    fn args(&self, source: &Path, mountpoint: &Path, o: &PeerOptions) -> Vec<String> {
        let (src, mnt) = (
            source.display().to_string(),
            mountpoint.display().to_string(),
        );
        match self {
            PeerKind::LibfusePassthroughLl => {
                // -f: stay in the foreground (we reap it); multi-threaded
                // is libfuse's default; clone_fd gives each thread its own
                // /dev/fuse fd, as uvfs's request loops have.
                let mut a = vec!["-f".into(), "-o".into(), format!("source={src}")];
                if let Some(t) = o.timeout_secs {
                    a.extend(["-o".into(), format!("timeout={t}")]);
                }
                a.extend(["-o".into(), "clone_fd".into()]);
                if let Some(n) = o.threads {
                    a.extend(["-o".into(), format!("max_threads={n}")]);
                }
                a.push(mnt);
                a
            }
            PeerKind::FuseBackendRs | PeerKind::FuseBackendRsFh => {
                let mut a = vec![src, mnt];
                if let Some(t) = o.timeout_secs {
                    a.extend(["--timeout".into(), t.to_string()]);
                }
                if let Some(n) = o.threads {
                    a.extend(["--threads".into(), n.to_string()]);
                }
                if *self == PeerKind::FuseBackendRsFh {
                    a.push("--file-handles".into());
                }
                a
            }
            // go-fuse serves each request on a goroutine of its own: it
            // has no thread count to set.
            PeerKind::GoFuseLoopback => {
                let mut a = Vec::new();
                if let Some(t) = o.timeout_secs {
                    a.extend([
                        "-entry-timeout".into(),
                        t.to_string(),
                        "-attr-timeout".into(),
                        t.to_string(),
                    ]);
                }
                a.extend([mnt, src]);
                a
            }
        }
    }
}

/// How a peer is run.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerOptions {
    /// Entry and attribute timeout, seconds; `None`: none is passed, so the
    /// peer runs at its own default ([`PeerKind::default_timeout_secs`]).
    pub timeout_secs: Option<f64>,
    /// Request threads (libfuse: its `max_threads`); `None`: the peer's
    /// own default.
    pub threads: Option<usize>,
}

impl PeerOptions {
    /// The peer as a user who types no option runs it.
    pub fn peer_defaults() -> Self {
        PeerOptions {
            timeout_secs: None,
            threads: None,
        }
    }

    /// The entry and attribute timeout `kind` runs with under these
    /// options.
    pub fn effective_timeout_secs(&self, kind: PeerKind) -> f64 {
        self.timeout_secs
            .unwrap_or_else(|| kind.default_timeout_secs())
    }
}

/// [`DEFAULT_TIMEOUT_SECS`], the peer's own thread count.
impl Default for PeerOptions {
    fn default() -> Self {
        PeerOptions {
            timeout_secs: Some(DEFAULT_TIMEOUT_SECS),
            threads: None,
        }
    }
}

/// The workspace this crate was built from (where `scripts/` is).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The cargo target directory: `$CARGO_TARGET_DIR`, else the nearest
/// ancestor of this executable that cargo tagged as a target dir (so
/// `target/release/uvfs` and test binaries in `target/release/deps` agree),
/// else the workspace's `target/`.
pub fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        return if d.is_absolute() {
            d
        } else {
            // Relative to where cargo ran: the workspace, as the scripts do.
            workspace_root().join(d)
        };
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .skip(1)
                .find(|a| a.join("CACHEDIR.TAG").is_file())
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Where the peers' binaries are.
pub fn peers_dir() -> PathBuf {
    target_dir().join("peers")
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The peer's binary, built with `scripts/build-peers.sh` if it is missing.
pub fn ensure_built(kind: PeerKind) -> io::Result<PathBuf> {
    let bin = peers_dir().join(kind.binary());
    if is_executable(&bin) {
        return Ok(bin);
    }
    let script = workspace_root().join("scripts/build-peers.sh");
    if !script.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{} is not built ({}) and {} is not there to build it",
                kind.name(),
                bin.display(),
                script.display()
            ),
        ));
    }
    let out = crate::cleanup::unblock_in_child(&mut Command::new("bash"))
        .arg(&script)
        .arg(kind.binary())
        .env("CARGO_TARGET_DIR", target_dir())
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() || !is_executable(&bin) {
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text += &String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = text.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(io::Error::other(format!(
            "building {} with scripts/build-peers.sh failed ({}): {}",
            kind.name(),
            out.status,
            tail.join(" | ")
        )));
    }
    Ok(bin)
}

/// A peer server in a child process, mounted over a source directory on a
/// scratch mountpoint; unmounted, killed if need be, and reaped on drop.
pub struct PeerMount {
    kind: PeerKind,
    child: Option<Child>,
    leftovers: fuse_mount::ServerLeftovers,
    pid: u32,
    mountpoint: PathBuf,
    /// The peer's stdout and stderr.
    log: PathBuf,
}

impl PeerMount {
    /// Builds the peer if missing (scripts/build-peers.sh), mounts it over
    /// `source` on `scratch_path(tag)`, waits until mounted. Timeouts as
    /// [`DEFAULT_TIMEOUT_SECS`], threads the peer's default.
    pub fn start(kind: PeerKind, source: &Path, tag: &str) -> io::Result<PeerMount> {
        PeerMount::start_with(kind, source, tag, &PeerOptions::default())
    }

    /// [`PeerMount::start`] with options.
    pub fn start_with(
        kind: PeerKind,
        source: &Path,
        tag: &str,
        o: &PeerOptions,
    ) -> io::Result<PeerMount> {
        fuse_mount::check_fuse()?;
        let bin = ensure_built(kind)?;
        let source = source.canonicalize().map_err(|e| {
            io::Error::new(e.kind(), format!("peer source {}: {e}", source.display()))
        })?;
        let mountpoint = scratch_path(tag);
        // A file, not a pipe: a pipe nobody drains would block the peer.
        let log = mountpoint.with_extension("log");
        let mut leftovers = fuse_mount::ServerLeftovers::new(&mountpoint, &log);
        std::fs::create_dir_all(&mountpoint)?;
        let out = File::create(&log)?;
        let mut cmd = Command::new(&bin);
        crate::cleanup::unblock_in_child(&mut cmd);
        crate::hugepages::as_inherited(&mut cmd);
        cmd.args(kind.args(&source, &mountpoint, o))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        crate::cleanup::dies_with_parent(&mut cmd);
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_file(&log);
                let _ = std::fs::remove_dir(&mountpoint);
                return Err(io::Error::new(e.kind(), format!("{}: {e}", bin.display())));
            }
        };
        leftovers.spawned(child.id(), &mountpoint);
        let mut m = PeerMount {
            kind,
            pid: child.id(),
            child: Some(child),
            leftovers,
            mountpoint,
            log,
        };
        let deadline = Instant::now() + MOUNT_WAIT;
        loop {
            if fuse_mount::is_mounted(&m.mountpoint)? {
                return Ok(m);
            }
            if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(io::Error::other(format!(
                    "{} exited ({status}) before mounting: {}",
                    kind.name(),
                    m.log().trim()
                )));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} did not mount within {MOUNT_WAIT:?}: {}",
                        kind.name(),
                        m.log().trim()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Where the peer is mounted.
    pub fn root(&self) -> &Path {
        &self.mountpoint
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn kind(&self) -> PeerKind {
        self.kind
    }

    /// What the peer printed so far (its last 4 KiB).
    pub fn log(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        String::from_utf8_lossy(&text[text.len().saturating_sub(4096)..]).into_owned()
    }

    /// Unmounts and reaps the peer (see the module notes); an error says it
    /// had to be killed. Idempotent; drop calls it.
    pub fn shutdown(&mut self) -> io::Result<()> {
        match self.child.take() {
            Some(mut child) => {
                self.leftovers.reaping();
                fuse_mount::stop_server(
                    &mut child,
                    &self.mountpoint,
                    &self.log,
                    EXIT_WAIT,
                    self.kind.name(),
                )
            }
            None => Ok(()),
        }
    }
}

impl Drop for PeerMount {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            eprintln!("uvfs bench: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in PeerKind::ALL {
            assert_eq!(PeerKind::from_name(k.name()), Some(k));
        }
        assert_eq!(PeerKind::from_name("uvfs-passthrough"), None);
        assert_eq!(
            PeerKind::LibfusePassthroughLl.name(),
            "libfuse-passthrough_ll"
        );
        assert_eq!(PeerKind::FuseBackendRs.name(), "fuse-backend-rs");
        assert_eq!(PeerKind::FuseBackendRsFh.name(), "fuse-backend-rs-fh");
        assert_eq!(PeerKind::GoFuseLoopback.name(), "go-fuse-loopback");
    }

    #[test]
    fn command_lines() {
        let o = PeerOptions {
            timeout_secs: Some(60.0),
            threads: None,
        };
        let ll = PeerKind::LibfusePassthroughLl.args(Path::new("/src"), Path::new("/mnt"), &o);
        assert_eq!(
            ll.join(" "),
            "-f -o source=/src -o timeout=60 -o clone_fd /mnt"
        );
        let o = PeerOptions {
            timeout_secs: Some(1.5),
            threads: Some(4),
        };
        let fbr = PeerKind::FuseBackendRs.args(Path::new("/src"), Path::new("/mnt"), &o);
        assert_eq!(fbr.join(" "), "/src /mnt --timeout 1.5 --threads 4");
        let fh = PeerKind::FuseBackendRsFh.args(Path::new("/src"), Path::new("/mnt"), &o);
        assert_eq!(
            fh.join(" "),
            "/src /mnt --timeout 1.5 --threads 4 --file-handles"
        );
        let go = PeerKind::GoFuseLoopback.args(Path::new("/src"), Path::new("/mnt"), &o);
        assert_eq!(
            go.join(" "),
            "-entry-timeout 1.5 -attr-timeout 1.5 /mnt /src",
            "go-fuse takes the mountpoint first and has no thread count"
        );
    }

    #[test]
    fn peer_defaults_pass_no_timeout() {
        let o = PeerOptions::peer_defaults();
        let (src, mnt) = (Path::new("/src"), Path::new("/mnt"));
        let line = |k: PeerKind| k.args(src, mnt, &o).join(" ");
        assert_eq!(
            line(PeerKind::LibfusePassthroughLl),
            "-f -o source=/src -o clone_fd /mnt"
        );
        assert_eq!(line(PeerKind::FuseBackendRs), "/src /mnt");
        assert_eq!(line(PeerKind::FuseBackendRsFh), "/src /mnt --file-handles");
        assert_eq!(line(PeerKind::GoFuseLoopback), "/mnt /src");
        assert_eq!(o.effective_timeout_secs(PeerKind::FuseBackendRs), 5.0);
        assert_eq!(o.effective_timeout_secs(PeerKind::GoFuseLoopback), 1.0);
        let given = PeerOptions::default();
        assert_eq!(
            given.effective_timeout_secs(PeerKind::FuseBackendRs),
            DEFAULT_TIMEOUT_SECS
        );
    }

    #[test]
    fn target_dir_is_absolute() {
        assert!(target_dir().is_absolute());
        assert!(peers_dir().ends_with("peers"));
    }
}
