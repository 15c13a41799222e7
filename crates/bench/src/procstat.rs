//! What a FUSE server process holds, read from `/proc/PID`: open fds,
//! resident memory, its fd limit; [`Sampler`], a thread that polls them
//! while a benchmark pass runs and keeps the peaks; and the CPU time the
//! process has used (`process_cpu_secs`, `process_cpu_secs_fine`).
//!
//! # Why poll
//! The questions are "did the server stay under its fd budget" and "how
//! much memory does its cache cost", for any server: ours and the peers,
//! which have no counters we can read. `/proc` answers both from outside.
//! A poll can miss a peak shorter than its period; fd counts of a walk grow
//! as plateaus (one fd per cached inode for the peers, a pool for uvfs), so
//! the peak is seen, and the final sample taken on stop catches a count
//! that was still rising when the walk ended. `VmHWM` is the kernel's own
//! lifetime peak, kept alongside.
//!
//! # Cost
//! The fd count comes from `stat("/proc/PID/fd").st_size`, which Linux
//! (6.2 and later) fills with the number of open fds from the fd bitmap,
//! without listing them: a poll stays cheap even when the server holds
//! 20,000 fds. Older kernels report 0 there, and the directory is listed
//! instead.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often [`Sampler`] polls by default.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(25);

/// One reading of a process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcUsage {
    /// Open fds.
    pub fds: u64,
    /// `VmRSS`, bytes.
    pub rss_bytes: u64,
    /// `VmHWM` (peak RSS since the process started), bytes.
    pub hwm_bytes: u64,
}

/// A `kB` field of `/proc/PID/status` text (`"VmRSS:\t  1234 kB"`), in
/// bytes.
pub fn parse_status_kb(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let kb = rest.trim().strip_suffix("kB")?.trim();
        kb.parse::<u64>().ok().map(|k| k * 1024)
    })
}

/// The soft "Max open files" limit from `/proc/PID/limits` text (`None`
/// when unlimited or missing).
pub fn parse_fd_limit(text: &str) -> Option<u64> {
    let rest = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    rest.split_whitespace().next()?.parse().ok()
}

/// Open fds of `pid` (see the module notes on how it is counted).
pub fn fd_count(pid: u32) -> io::Result<u64> {
    let dir = format!("/proc/{pid}/fd");
    let n = std::fs::metadata(&dir)?.len();
    if n > 0 {
        return Ok(n);
    }
    Ok(std::fs::read_dir(&dir)?.count() as u64)
}

/// io_uring instances `pid` has open (its fds that are
/// `anon_inode:[io_uring]`): a FUSE server taking requests through
/// io_uring holds at least one.
pub fn io_uring_fds(pid: u32) -> io::Result<usize> {
    let mut n = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        // An fd may close between the listing and the readlink.
        if e.and_then(|e| std::fs::read_link(e.path()))
            .is_ok_and(|t| t.as_os_str() == "anon_inode:[io_uring]")
        {
            n += 1;
        }
    }
    Ok(n)
}

/// Fds, RSS and peak RSS of `pid` now.
pub fn usage(pid: u32) -> io::Result<ProcUsage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |k: &str| {
        parse_status_kb(&status, k).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/proc/{pid}/status: no {k}"),
            )
        })
    };
    Ok(ProcUsage {
        rss_bytes: field("VmRSS")?,
        hwm_bytes: field("VmHWM")?,
        fds: fd_count(pid)?,
    })
}

/// The soft fd limit of `pid`, if it has one.
pub fn fd_limit(pid: u32) -> io::Result<Option<u64>> {
    Ok(parse_fd_limit(&std::fs::read_to_string(format!(
        "/proc/{pid}/limits"
    ))?))
}

/// The largest readings over a sampling window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peaks {
    /// Most fds seen open at once.
    pub max_fds: u64,
    /// Largest `VmRSS` seen, bytes.
    pub max_rss_bytes: u64,
    /// Largest `VmHWM` seen, bytes (the process's lifetime peak, so it
    /// includes what earlier passes used).
    pub hwm_bytes: u64,
    /// Readings taken (0: the process could never be read).
    pub samples: u64,
}

impl Peaks {
    /// Folds one reading in.
    pub fn add(&mut self, u: ProcUsage) {
        self.max_fds = self.max_fds.max(u.fds);
        self.max_rss_bytes = self.max_rss_bytes.max(u.rss_bytes);
        self.hwm_bytes = self.hwm_bytes.max(u.hwm_bytes);
        self.samples += 1;
    }

    /// The peaks of two windows together.
    pub fn merge(&mut self, o: Peaks) {
        self.max_fds = self.max_fds.max(o.max_fds);
        self.max_rss_bytes = self.max_rss_bytes.max(o.max_rss_bytes);
        self.hwm_bytes = self.hwm_bytes.max(o.hwm_bytes);
        self.samples += o.samples;
    }
}

/// A thread polling one process every `period` until [`Sampler::stop`].
/// A process that goes away (or cannot be read) is simply not sampled any
/// more: a dead server is the pass's problem to report, not the sampler's.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Peaks>,
}

impl Sampler {
    /// Takes a first reading of `pid` right away, then one every `period`.
    pub fn start(pid: u32, period: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("sampler-{pid}"))
            .spawn(move || {
                let mut peaks = Peaks::default();
                loop {
                    // Read the flag before sampling, so the reading taken
                    // after `stop` is the last one.
                    let last = flag.load(Ordering::Acquire);
                    if let Ok(u) = usage(pid) {
                        peaks.add(u);
                    }
                    if last {
                        return peaks;
                    }
                    std::thread::park_timeout(period);
                }
            })
            .expect("spawning the sampler thread");
        Sampler { stop, thread }
    }

    /// Takes a last reading and returns the peaks.
    pub fn stop(self) -> Peaks {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        self.thread.join().unwrap_or_default()
    }
}

/// utime + stime (clock ticks) from the text of `/proc/PID/stat`.
pub fn parse_proc_stat_ticks(text: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces and
    // parentheses itself; fields are counted after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): utime is field 14, stime field 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU seconds used so far by process `pid` (10 ms resolution).
pub fn process_cpu_secs(pid: u32) -> io::Result<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_proc_stat_ticks(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad /proc/PID/stat"))?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    Ok(ticks as f64 / hz as f64)
}

/// CPU time of a process's live threads, in seconds, to the nanosecond
/// (the scheduler's run time in `/proc/PID/task/*/schedstat`; the clock
/// ticks of `/proc/PID/stat` are 10 ms, too coarse for a pass of a tenth
/// of a second). Threads that exited are not counted.
pub fn process_cpu_secs_fine(pid: u32) -> io::Result<f64> {
    let mut ns: u64 = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = t?.path().join("schedstat");
        // A thread may exit between the listing and the read.
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        ns += text
            .split_whitespace()
            .next()
            .and_then(|x| x.parse::<u64>().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad schedstat"))?;
    }
    Ok(ns as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tpassthrough_ll\nUmask:\t0000\nState:\tS (sleeping)\n\
        VmPeak:\t  221240 kB\nVmSize:\t  221236 kB\nVmLck:\t       0 kB\n\
        VmHWM:\t   10240 kB\nVmRSS:\t    8192 kB\nRssAnon:\t     512 kB\n\
        FDSize:\t32768\nThreads:\t4\n";

    #[test]
    fn status_fields_in_bytes() {
        assert_eq!(parse_status_kb(STATUS, "VmRSS"), Some(8192 * 1024));
        assert_eq!(parse_status_kb(STATUS, "VmHWM"), Some(10240 * 1024));
        // Not a prefix match: "VmRSS" must not read "VmRSSx" or "RssAnon".
        assert_eq!(parse_status_kb(STATUS, "Rss"), None);
        // FDSize is a slot count, not kB.
        assert_eq!(parse_status_kb(STATUS, "FDSize"), None);
        assert_eq!(parse_status_kb("", "VmRSS"), None);
        assert_eq!(parse_status_kb("VmRSS:\t garbage kB\n", "VmRSS"), None);
    }

    #[test]
    fn fd_limit_is_the_soft_one() {
        let limits =
            "Limit                     Soft Limit           Hard Limit           Units     \n\
            Max processes             95000                95000                processes \n\
            Max open files            1024                 20000                files     \n";
        assert_eq!(parse_fd_limit(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_fd_limit(unlimited), None);
        assert_eq!(parse_fd_limit(""), None);
    }

    #[test]
    fn peaks_keep_maxima() {
        let mut p = Peaks::default();
        p.add(ProcUsage {
            fds: 10,
            rss_bytes: 100,
            hwm_bytes: 100,
        });
        p.add(ProcUsage {
            fds: 7,
            rss_bytes: 300,
            hwm_bytes: 300,
        });
        assert_eq!((p.max_fds, p.max_rss_bytes, p.samples), (10, 300, 2));
        let mut q = Peaks::default();
        q.add(ProcUsage {
            fds: 20,
            rss_bytes: 50,
            hwm_bytes: 400,
        });
        p.merge(q);
        assert_eq!(
            p,
            Peaks {
                max_fds: 20,
                max_rss_bytes: 300,
                hwm_bytes: 400,
                samples: 3
            }
        );
    }

    #[test]
    fn own_process_is_sampled() {
        let me = std::process::id();
        let u = usage(me).unwrap();
        assert!(u.fds >= 3 && u.rss_bytes > 0 && u.hwm_bytes >= u.rss_bytes);
        // Opening files shows up in the count (other test threads may
        // open and close their own meanwhile, so only a lower bound).
        let files: Vec<_> = (0..64)
            .map(|_| std::fs::File::open("/proc/self/status").unwrap())
            .collect();
        let s = Sampler::start(me, Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(20));
        let p = s.stop();
        drop(files);
        assert!(p.samples >= 2, "{p:?}");
        assert!(p.max_fds >= 64, "{p:?}");
        assert!(fd_limit(me).unwrap().is_some_and(|l| l >= 64));
        // A process that does not exist yields no readings, not an error.
        let gone = Sampler::start(u32::MAX - 1, Duration::from_millis(1));
        assert_eq!(gone.stop().samples, 0);
    }

    #[test]
    fn proc_stat_cpu_ticks() {
        // A command name with a space and a parenthesis, as allowed.
        let t = "4242 (uvfs (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                 157 43 0 0 20 0 5 0 12345 1000000 200 18446744073709551615";
        assert_eq!(parse_proc_stat_ticks(t), Some(200));
        assert_eq!(parse_proc_stat_ticks("1 (short) S 1 2"), None);
        assert_eq!(parse_proc_stat_ticks("garbage"), None);
    }

    #[test]
    fn own_process_cpu_is_readable() {
        assert!(process_cpu_secs(std::process::id()).unwrap() >= 0.0);
    }
}
