//! `uvfs bench coherence`: how long a change made on the host, directly in
//! a passthrough's source directory, takes to show through the mount.
//!
//! # Setup
//! Each server gets a source directory of its own on a real file system
//! (`--source-dir`, `/var/tmp` by default: ext4 here, where tmpfs would
//! lack what some servers need, such as file handles), with one
//! subdirectory per kind of change, and mounts it as a user who types no
//! option would: `uvfs mount --source DIR` (`uvfs-passthrough-default`),
//! the same with `--no-watch` where `uvfs mount` has it, and every peer at
//! its own default timeouts (`peers.rs`). A peer that cannot be built or
//! mounted becomes rows with the reason.
//!
//! # Trials
//! For each kind of change (`coherence/kinds.rs`: create, unlink, rename,
//! write, overwrite, truncate, chmod, chown, utimes, setxattr, removexattr,
//! link, mkdir, rmdir), `--trials` times: set the trial's starting state up
//! in the source; probe it through the mount until it shows (which also
//! warms the kernel's caches: the entry, its attributes, the listing);
//! make the change in the source; probe through the mount every `--poll`
//! until the whole change shows, or `--wait` passes ("never"). Each kind
//! has a directory of its own; the watched passthrough's kinds run one
//! after another, every other server's at once, a thread each
//! (`one_at_a_time` says why; `--together`: all at once everywhere); the
//! servers run one after another, so one server's pollers do not slow
//! another's.
//!
//! A server that caches for a timeout shows a change when the kernel's
//! entry or attributes expire: about that timeout, since the probe just
//! refreshed them. What a server serves without caching (xattrs, data read
//! through the kernel's passthrough) shows at once.

mod kinds;
mod rows;

pub use kinds::{Kind, State};
pub use rows::{chart, make_row, percentile, summary, Outcome, RowKey, COLUMNS};

use crate::fuse_mount::{self, ScratchDir, ServerMount};
use crate::peers::{PeerKind, PeerMount, PeerOptions};
use crate::report::{Progress, Report};
use crate::CommonOpts;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// uvfs's passthrough with no option but `--source`.
pub const PASSTHROUGH_DEFAULT: &str = "uvfs-passthrough-default";
/// The same with `--no-watch`.
pub const PASSTHROUGH_NOWATCH: &str = "uvfs-passthrough-nowatch";

#[derive(clap::Args, Debug, Clone)]
pub struct CoherenceOpts {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Trials per server and kind of change (default 20; 5 with --quick).
    #[arg(long, value_parser = crate::at_least_one())]
    pub trials: Option<usize>,
    /// Longest wait for a change to show, seconds (default 6, past every
    /// peer's default timeout; 2 with --quick, past the 1 s ones).
    #[arg(long, value_parser = crate::positive_secs)]
    pub wait: Option<f64>,
    /// Time between two probes through the mount, milliseconds.
    #[arg(long, default_value_t = 0.5, value_parser = crate::positive_secs)]
    pub poll_ms: f64,
    /// Servers (default: uvfs-passthrough-default, uvfs-passthrough-nowatch
    /// where `uvfs mount` has --no-watch, libfuse-passthrough_ll,
    /// fuse-backend-rs, fuse-backend-rs-fh, go-fuse-loopback).
    #[arg(long, value_delimiter = ',')]
    pub fs: Option<Vec<String>>,
    /// Kinds of change (default: all of create, unlink, rename, write,
    /// overwrite, truncate, chmod, chown, utimes, setxattr, removexattr,
    /// link, mkdir, rmdir).
    #[arg(long, value_delimiter = ',')]
    pub kinds: Option<Vec<String>>,
    /// Where the source directories are made (a real file system).
    #[arg(long, default_value = "/var/tmp")]
    pub source_dir: PathBuf,
    /// Run every kind of change at once on every server, the watched
    /// passthrough's too (see `one_at_a_time`).
    #[arg(long)]
    pub together: bool,
}

/// Whether `server`'s kinds of change run one after another rather than
/// all at once, each poller alone with the change it waits for.
///
/// A poller probes without pause but `--poll_ms`: every kind's at once
/// compete with the server and its watcher for the CPUs, and a change
/// that shows within milliseconds (the watched passthrough's) would be
/// timed waiting for a CPU behind the other kinds' pollers, not for the
/// server. A server whose changes
/// show when a timeout of a second runs out is timed the same either way,
/// and its kinds run at once so that the run takes seconds, not minutes.
/// `--together` runs every server's kinds at once, the loaded case.
fn one_at_a_time(server: &str, together: bool) -> bool {
    !together && server == PASSTHROUGH_DEFAULT
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Every server, in run order.
fn all_servers() -> Vec<&'static str> {
    let mut v = vec![PASSTHROUGH_DEFAULT, PASSTHROUGH_NOWATCH];
    v.extend(PeerKind::ALL.iter().map(|k| k.name()));
    v
}

/// The servers to run and messages about those skipped (`no_watch`:
/// whether `uvfs mount` has `--no-watch`).
fn choose_servers(
    o: &CoherenceOpts,
    no_watch: bool,
) -> io::Result<(Vec<&'static str>, Vec<String>)> {
    let all = all_servers();
    let wanted: Vec<String> = match &o.fs {
        Some(v) => v.clone(),
        None => all.iter().map(|s| s.to_string()).collect(),
    };
    for w in &wanted {
        if !all.contains(&w.as_str()) {
            return Err(bad(format!("unknown --fs {w:?} ({})", all.join(", "))));
        }
    }
    let mut skipped = Vec::new();
    let names = all
        .into_iter()
        .filter(|a| wanted.iter().any(|w| w == a))
        .filter(|&a| {
            let keep = a != PASSTHROUGH_NOWATCH || no_watch;
            if !keep {
                skipped.push(format!(
                    "{PASSTHROUGH_NOWATCH}: skipped: this `uvfs mount` has no --no-watch"
                ));
            }
            keep
        })
        .collect();
    Ok((names, skipped))
}

fn choose_kinds(o: &CoherenceOpts) -> io::Result<Vec<Kind>> {
    let Some(v) = &o.kinds else {
        return Ok(Kind::ALL.to_vec());
    };
    v.iter()
        .map(|s| {
            Kind::from_name(s).ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(Kind::name).collect();
                bad(format!("unknown --kinds {s:?} ({})", names.join(", ")))
            })
        })
        .collect()
}

/// A mounted server.
enum Server {
    Uvfs(ServerMount),
    Peer(PeerMount),
}

impl Server {
    fn root(&self) -> &Path {
        match self {
            Server::Uvfs(m) => m.root(),
            Server::Peer(p) => p.root(),
        }
    }

    /// uvfs: whether its watcher runs, where its statistics say.
    fn watch(&self) -> Option<bool> {
        match self {
            Server::Uvfs(m) => m
                .report()
                .ok()?
                .pointer("/counters/passthrough.watch.active")?
                .as_u64()
                .map(|v| v != 0),
            Server::Peer(_) => None,
        }
    }

    fn shutdown(&mut self) -> io::Result<()> {
        match self {
            Server::Uvfs(m) => m.shutdown(),
            Server::Peer(p) => p.shutdown(),
        }
    }
}

fn mount(name: &str, source: &Path) -> io::Result<Server> {
    let src = source.display().to_string();
    match name {
        PASSTHROUGH_DEFAULT => {
            ServerMount::start("coherence-default", &["--source".into(), src]).map(Server::Uvfs)
        }
        PASSTHROUGH_NOWATCH => ServerMount::start(
            "coherence-nowatch",
            &["--source".into(), src, "--no-watch".into()],
        )
        .map(Server::Uvfs),
        _ => {
            let kind =
                PeerKind::from_name(name).ok_or_else(|| bad(format!("{name}: no such peer")))?;
            let tag = format!("coherence-{name}");
            PeerMount::start_with(kind, source, &tag, &PeerOptions::peer_defaults())
                .map(Server::Peer)
        }
    }
}

/// The timing of the trials.
#[derive(Clone, Copy, Debug)]
struct Timing {
    wait: Duration,
    poll: Duration,
}

/// Probes until `want(state)` or the wait passes; the last state or
/// error, and when the probe that ended it finished.
fn poll_until(
    kind: Kind,
    dir: &Path,
    i: usize,
    t: Timing,
    start: Instant,
    want: impl Fn(&State) -> bool,
) -> (Result<State, io::Error>, Instant) {
    loop {
        let s = kind.probe_state(dir, i);
        let now = Instant::now();
        if s.as_ref().is_ok_and(&want) || now.duration_since(start) >= t.wait {
            return (s, now);
        }
        std::thread::sleep(t.poll);
    }
}

/// How a trial the mount cannot serve fails (its later trials are not run).
const UNSUPPORTED: &str = "unsupported";

/// Whether an error says the server does not do what the probe asks
/// (no xattrs, say), so later trials would fail alike.
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
    )
}

/// One trial of `kind`: `src` and `mnt` are the kind's directory in the
/// source and through the mount.
fn trial(kind: Kind, src: &Path, mnt: &Path, i: usize, t: Timing) -> Outcome {
    if let Err(e) = kind.setup(src, i) {
        return Outcome::Failed(format!("setup in the source: {e}"));
    }
    // Until the starting state shows (and the kernel holds it).
    let (s, _) = poll_until(kind, mnt, i, t, Instant::now(), |s| *s == State::Old);
    match s {
        Ok(State::Old) => {}
        Ok(other) => {
            return Outcome::Failed(format!(
                "the starting state never showed through the mount: {other:?}"
            ))
        }
        Err(e) if unsupported(&e) => {
            return Outcome::Failed(format!("{UNSUPPORTED}: {}: {e}", kind.probe()))
        }
        Err(e) => return Outcome::Failed(format!("{} through the mount: {e}", kind.probe())),
    }
    let start = Instant::now();
    if let Err(e) = kind.change(src, i) {
        return Outcome::Failed(format!("the change in the source: {e}"));
    }
    match poll_until(kind, mnt, i, t, start, |s| *s == State::New) {
        (Ok(State::New), at) => Outcome::Seen(at.duration_since(start)),
        (Ok(State::Old), _) => Outcome::Never("as before".into()),
        (Ok(State::Other(s)), _) => Outcome::Never(s),
        (Err(e), _) => Outcome::Never(format!("{}: {e}", kind.probe())),
    }
}

/// Every trial of `kind` on one mount; stops early when the mount refuses
/// the probe as unsupported.
fn run_kind(kind: Kind, src: &Path, mnt: &Path, trials: usize, t: Timing) -> Vec<Outcome> {
    let mut out = Vec::with_capacity(trials);
    for i in 0..trials {
        let o = trial(kind, src, mnt, i, t);
        let stop = matches!(&o, Outcome::Failed(s) if s.starts_with(UNSUPPORTED));
        out.push(o);
        if stop {
            break;
        }
    }
    out
}

/// Runs the workload: a row per (server, kind).
pub fn run(o: &CoherenceOpts) -> io::Result<Report> {
    let trials = o.trials.unwrap_or(if o.common.quick { 5 } else { 20 });
    let repeats = if o.common.quick { 1 } else { o.common.repeats };
    let t = Timing {
        wait: Duration::from_secs_f64(o.wait.unwrap_or(if o.common.quick { 2.0 } else { 6.0 })),
        poll: Duration::from_secs_f64(o.poll_ms / 1e3),
    };
    let mut kinds = choose_kinds(o)?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 && kinds.contains(&Kind::Chown) {
        eprintln!("uvfs bench coherence: chown skipped: not root");
        kinds.retain(|&k| k != Kind::Chown);
    }
    let (servers, skipped) = choose_servers(o, fuse_mount::mount_supports("--no-watch"))?;
    for m in &skipped {
        eprintln!("uvfs bench coherence: {m}");
    }
    if servers.iter().any(|s| s.starts_with("uvfs")) && !fuse_mount::mount_supports("--source") {
        return Err(bad(
            "uvfs-passthrough needs `uvfs mount --source DIR`, which this build lacks".into(),
        ));
    }
    fuse_mount::check_fuse()?;
    let base = ScratchDir::create(
        o.source_dir
            .join(format!("uvfs-bench-{}-coherence", std::process::id())),
        true,
    )?;
    let mut prog = Progress::new(servers.len());
    let mut report = Report::new("coherence");
    for &name in &servers {
        prog.step(&format!(
            "coherence: {name}: {} kinds x {trials} trials x {repeats} repeats",
            kinds.len()
        ));
        let (options, timeout_secs) = match PeerKind::from_name(name) {
            Some(p) => ("peer default", Some(p.default_timeout_secs())),
            None if name == PASSTHROUGH_NOWATCH => ("no-watch", None),
            None => ("default", None),
        };
        let key = |k: Kind, watch| RowKey {
            server: name,
            options,
            timeout_secs,
            watch,
            kind: k.name(),
            probe: k.probe(),
            wait: t.wait,
            poll: t.poll,
            alone: one_at_a_time(name, o.together),
        };
        // Each repeat on a fresh source and mount, so that one round's
        // leftovers (the names its trials made) do not grow the next
        // round's listings.
        let mut rounds: Vec<Vec<Vec<Outcome>>> = vec![Vec::new(); kinds.len()];
        let mut watch = None;
        for round in 0..repeats {
            let source = base.path.join(format!("{name}-{round}"));
            for k in &kinds {
                std::fs::create_dir_all(source.join(k.name()))?;
            }
            let mut server = match mount(name, &source) {
                Ok(s) => s,
                // A peer that cannot be had is a result; uvfs failing to
                // mount ends the run.
                Err(e) if PeerKind::from_name(name).is_some() => {
                    let e = e.to_string();
                    for &k in &kinds {
                        report.rows.push(make_row(&key(k, None), Some(&e), &[]));
                    }
                    rounds.clear();
                    break;
                }
                Err(e) => return Err(e),
            };
            watch = server.watch();
            let root = server.root().to_path_buf();
            let run = |k: Kind| {
                let (src, mnt) = (source.join(k.name()), root.join(k.name()));
                run_kind(k, &src, &mnt, trials, t)
            };
            let results: Vec<Vec<Outcome>> = if one_at_a_time(name, o.together) {
                kinds.iter().map(|&k| run(k)).collect()
            } else {
                std::thread::scope(|sc| {
                    let handles: Vec<_> = kinds.iter().map(|&k| sc.spawn(move || run(k))).collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().expect("a trial thread panicked"))
                        .collect()
                })
            };
            for (r, outcomes) in rounds.iter_mut().zip(results) {
                r.push(outcomes);
            }
            match (server.shutdown(), &server) {
                (Err(e), Server::Uvfs(_)) => return Err(e),
                (Err(e), Server::Peer(_)) => eprintln!("uvfs bench coherence: {e}"),
                (Ok(()), _) => {}
            }
            drop(server);
            // The trials' files, before the next round's.
            let _ = std::fs::remove_dir_all(&source);
        }
        for (&k, r) in kinds.iter().zip(&rounds) {
            report.rows.push(make_row(&key(k, watch), None, r));
        }
    }
    prog.finish();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> CoherenceOpts {
        CoherenceOpts {
            common: CommonOpts::default(),
            trials: None,
            wait: None,
            poll_ms: 0.5,
            fs: None,
            kinds: None,
            source_dir: "/var/tmp".into(),
            together: false,
        }
    }

    #[test]
    fn server_and_kind_choice() {
        let mut o = opts();
        let (s, skipped) = choose_servers(&o, false).unwrap();
        assert_eq!(
            s,
            vec![
                PASSTHROUGH_DEFAULT,
                "libfuse-passthrough_ll",
                "fuse-backend-rs",
                "fuse-backend-rs-fh",
                "go-fuse-loopback"
            ]
        );
        assert_eq!(skipped.len(), 1, "no --no-watch: skipped with a message");
        let (s, skipped) = choose_servers(&o, true).unwrap();
        assert_eq!(&s[..2], &[PASSTHROUGH_DEFAULT, PASSTHROUGH_NOWATCH]);
        assert!(skipped.is_empty());
        o.fs = Some(vec!["go-fuse-loopback".into(), PASSTHROUGH_DEFAULT.into()]);
        let (s, _) = choose_servers(&o, true).unwrap();
        assert_eq!(
            s,
            vec![PASSTHROUGH_DEFAULT, "go-fuse-loopback"],
            "run order"
        );
        o.fs = Some(vec!["nfs".into()]);
        assert!(choose_servers(&o, true).is_err());
        assert_eq!(choose_kinds(&o).unwrap().len(), 14);
        o.kinds = Some(vec!["chmod".into(), "rename".into()]);
        assert_eq!(choose_kinds(&o).unwrap(), vec![Kind::Chmod, Kind::Rename]);
        o.kinds = Some(vec!["explode".into()]);
        assert!(choose_kinds(&o).is_err());
    }

    /// A trial on a plain directory (the "mount" is the source itself):
    /// every change shows at the first probe, well within the wait.
    #[test]
    fn trials_on_the_source_itself_see_every_change() {
        let dir = std::env::temp_dir().join(format!("uvfs-coherence-trial-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t = Timing {
            wait: Duration::from_secs(2),
            poll: Duration::from_micros(500),
        };
        for k in [
            Kind::Create,
            Kind::Rename,
            Kind::Write,
            Kind::Link,
            Kind::Rmdir,
        ] {
            let d = dir.join(k.name());
            std::fs::create_dir_all(&d).unwrap();
            let out = run_kind(k, &d, &d, 2, t);
            assert_eq!(out.len(), 2);
            for o in out {
                assert!(matches!(o, Outcome::Seen(_)), "{}: {o:?}", k.name());
            }
        }
        // A change that never comes: the starting state is there, the
        // "mount" is a directory the change is not made in.
        let (src, other) = (dir.join("src"), dir.join("other"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        Kind::Chmod.setup(&other, 0).unwrap();
        let short = Timing {
            wait: Duration::from_millis(20),
            ..t
        };
        match trial(Kind::Chmod, &src, &other, 0, short) {
            Outcome::Never(s) => assert_eq!(s, "as before"),
            o => panic!("{o:?}"),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
