//! The logger of `uvfs mount`, behind the `log` facade, which fuser logs
//! through too.
//!
//! Where lines go: stderr in the foreground; when the server detaches,
//! stderr (the terminal, until the mount is up) gets warnings and errors
//! only, and everything goes to `--log-file` if one is given, else to the
//! system log (`/dev/log`: the journal or syslog), else (a machine or
//! container with no system log) to the file [`detached`] is given, so a
//! detached server always leaves a trace. A log file is written in the
//! foreground too.
//!
//! Which lines: `--log-level`, else `RUST_LOG`, else `info`, in
//! `env_logger`'s syntax (`warn`, `info,fuser=debug`, ...).
//!
//! Records with target [`REPORTED`] skip stderr: what the command reports
//! there itself (a failed mount) is said once.
//!
//! No write can panic or fail the server: errors writing any destination
//! (a closed stderr pipe, a full disk, no syslog daemon) drop the line.
//! Errors, warnings and informational lines are rate-limited per message
//! key (`limit.rs`); debug and trace lines, asked for explicitly, are not.
//! `syslog.rs` writes to the system log.

mod limit;
mod syslog;

use limit::{Limiter, Verdict};
use log::{Level, LevelFilter, Log, Metadata, Record};
use parking_lot::Mutex;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

/// The target of records that the command also reports on stderr.
pub const REPORTED: &str = "uvfs::reported";

/// What `init` sets up.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// `--log-level`: a level or `env_logger` directives; `None` takes
    /// `RUST_LOG`, or `info`.
    pub level: Option<String>,
    /// `--log-file`: appended to.
    pub file: Option<PathBuf>,
    /// Serving in the foreground: every line goes to stderr.
    pub foreground: bool,
}

struct Logger {
    filter: env_filter::Filter,
    /// The most verbose level written to stderr (`LevelFilter as usize`).
    stderr_max: AtomicUsize,
    file: Option<Mutex<File>>,
    /// Where a detached server without `--log-file` or a system log writes.
    fallback: OnceLock<Mutex<File>>,
    syslog: Mutex<Option<syslog::Syslog>>,
    limiter: Mutex<Limiter>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// The level directives in force: `level`, else `RUST_LOG`, else `info`.
/// A bad `level` is an error (the user typed it for this command); a bad
/// `RUST_LOG` is not: the environment may have set it for another
/// program, and a mount must not fail for that. It falls back to `info`,
/// and the returned warning says so once the logger runs.
fn filter(level: Option<&str>) -> io::Result<(env_filter::Filter, Option<String>)> {
    filter_from(level, std::env::var("RUST_LOG").ok())
}

/// [`filter`] with `RUST_LOG`'s value given.
fn filter_from(
    level: Option<&str>,
    rust_log: Option<String>,
) -> io::Result<(env_filter::Filter, Option<String>)> {
    let bad = |spec: &str, e: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad log level {spec:?} ({e}): a level (error, warn, info, debug, trace, off) or directives such as info,fuser=debug"),
        )
    };
    let mut b = env_filter::Builder::new();
    let mut warning = None;
    match level {
        Some(spec) => {
            b.try_parse(spec).map_err(|e| bad(spec, &e))?;
        }
        None => match rust_log {
            Some(spec) if !spec.trim().is_empty() => {
                if let Err(e) = b.try_parse(&spec) {
                    warning = Some(format!(
                        "RUST_LOG ignored, logging at info: {}",
                        bad(&spec, &e)
                    ));
                    b = env_filter::Builder::new();
                    b.filter_level(LevelFilter::Info);
                }
            }
            _ => {
                b.filter_level(LevelFilter::Info);
            }
        },
    }
    Ok((b.build(), warning))
}

/// Installs the logger (once per process: a second call changes nothing).
/// Fails on a bad level or a log file that cannot be opened, before
/// anything is mounted.
pub fn init(cfg: &Config) -> io::Result<()> {
    let (filter, warning) = filter(cfg.level.as_deref())?;
    let file = match &cfg.file {
        Some(p) => Some(Mutex::new(open_log(p).map_err(|e| {
            io::Error::new(e.kind(), format!("--log-file {}: {e}", p.display()))
        })?)),
        None => None,
    };
    let max = filter.filter();
    let stderr_max = if cfg.foreground {
        max
    } else {
        max.min(LevelFilter::Warn)
    };
    let logger = Logger {
        filter,
        stderr_max: AtomicUsize::new(stderr_max as usize),
        file,
        fallback: OnceLock::new(),
        syslog: Mutex::new(None),
        limiter: Mutex::new(Limiter::default()),
    };
    if LOGGER.set(logger).is_err() {
        return Ok(());
    }
    if let Some(l) = LOGGER.get() {
        if log::set_logger(l).is_ok() {
            log::set_max_level(max);
            log_panics();
        }
    }
    if let Some(w) = warning {
        log::warn!("{w}");
    }
    Ok(())
}

/// A log file, appended to, readable by the owner's group.
fn open_log(p: &std::path::Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_CLOEXEC)
        .open(p)
}

/// Called in the detached server: from now on lines also go to the
/// system log unless they go to a log file, or to `fallback` where this
/// machine has no system log. Returns where they go, for the start line.
pub fn detached(fallback: Option<&std::path::Path>) -> Option<PathBuf> {
    let l = LOGGER.get()?;
    if l.file.is_some() {
        return None;
    }
    if syslog::listening() {
        *l.syslog.lock() = Some(syslog::Syslog::new());
        return Some(PathBuf::from(syslog::DEV_LOG));
    }
    let p = fallback?;
    let f = open_log(p).ok()?;
    let _ = l.fallback.set(Mutex::new(f));
    Some(p.to_path_buf())
}

/// Panics are logged (a detached server's stderr is /dev/null), then
/// passed on to the panic hook that was in place.
fn log_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        log::error!(
            "thread {} panicked: {info}",
            thread.name().unwrap_or("unnamed")
        );
        previous(info);
    }));
}

/// The crate a target names: `uvfs_fuse::server` -> `uvfs_fuse`.
fn crate_of(target: &str) -> &str {
    target.split("::").next().unwrap_or(target)
}

/// A line for stderr or the system log: uvfs's own messages as they are,
/// others (fuser's) named by their crate; levels other than info named.
fn short_line(record: &Record<'_>, msg: &str) -> String {
    let krate = crate_of(record.target());
    let from = if krate.starts_with("uvfs") {
        String::new()
    } else {
        format!("{krate}: ")
    };
    let level = match record.level() {
        Level::Info => String::new(),
        l => format!("{}: ", l.as_str().to_ascii_lowercase()),
    };
    format!("{level}{from}{msg}")
}

impl Logger {
    /// Writes `msg` to every destination that takes `record`'s level.
    fn write(&self, record: &Record<'_>, msg: &str) {
        let level = record.level();
        let short = short_line(record, msg);
        if level as usize <= self.stderr_max.load(Ordering::Relaxed) && record.target() != REPORTED
        {
            // Never eprintln!: it panics when stderr is a closed pipe.
            let _ = io::stderr()
                .lock()
                .write_all(format!("uvfs: {short}\n").as_bytes());
        }
        if let Some(f) = self.file.as_ref().or(self.fallback.get()) {
            let line = format!(
                "{} {:<5} {}: {msg}\n",
                humantime::format_rfc3339_millis(SystemTime::now()),
                level,
                record.target()
            );
            let _ = f.lock().write_all(line.as_bytes());
        }
        if let Some(s) = self.syslog.lock().as_mut() {
            s.send(level, &short);
        }
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !self.filter.matches(record) {
            return;
        }
        let mut msg = record.args().to_string();
        if record.level() <= Level::Info {
            let site = record.file().unwrap_or(record.target());
            let key = limit::key(site, record.line().unwrap_or(0), &msg);
            match self.limiter.lock().admit(key, &msg, Instant::now()) {
                Verdict::Drop => return,
                Verdict::Pass { suppressed: 0 } => {}
                Verdict::Pass { suppressed } => {
                    msg.push_str(&format!(" ({suppressed} more like it suppressed)"))
                }
            }
        }
        self.write(record, &msg);
    }

    /// Says what the rate limit dropped and has not said yet (called at
    /// shutdown).
    fn flush(&self) {
        let pending = self.limiter.lock().take_suppressed();
        for (n, sample) in pending {
            let msg = format!("{n} messages like {sample:?} suppressed");
            self.write(
                &Record::builder()
                    .level(Level::Warn)
                    .target("uvfs_logger")
                    .args(format_args!("{msg}"))
                    .build(),
                &msg,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_come_from_the_option_first() {
        let level = |o: Option<&str>, env: Option<&str>| {
            let (f, warning) = filter_from(o, env.map(String::from)).unwrap();
            (f.filter(), warning.is_some())
        };
        assert_eq!(
            level(Some("warn"), Some("trace")),
            (LevelFilter::Warn, false)
        );
        assert_eq!(
            level(Some("info,fuser=debug"), None),
            (LevelFilter::Debug, false)
        );
        assert_eq!(level(None, Some("debug")), (LevelFilter::Debug, false));
        assert_eq!(level(None, None), (LevelFilter::Info, false));
        assert_eq!(level(None, Some(" ")), (LevelFilter::Info, false));
        // A bad level typed for this command is refused ...
        let e = filter_from(Some("info,fuser=loud"), None).unwrap_err();
        assert!(e.to_string().contains("bad log level"), "{e}");
        // ... a bad RUST_LOG, maybe set for another program, is not: info,
        // and a warning to log.
        assert_eq!(
            level(None, Some("info,fuser=loud")),
            (LevelFilter::Info, true)
        );
        let (_, w) = filter_from(None, Some("x=loud".into())).unwrap();
        assert!(w.unwrap().contains("RUST_LOG ignored"));
    }

    #[test]
    fn short_lines_name_levels_and_foreign_crates() {
        let rec = Record::builder()
            .level(Level::Warn)
            .target("fuser::session")
            .build();
        assert_eq!(short_line(&rec, "x"), "warn: fuser: x");
        let rec = Record::builder()
            .level(Level::Info)
            .target("uvfs_fuse::mount")
            .build();
        assert_eq!(short_line(&rec, "x"), "x");
    }
}
