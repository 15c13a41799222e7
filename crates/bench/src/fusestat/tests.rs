use super::pass::*;
use super::rows::*;
use super::summary::*;
use super::targets::*;
use super::*;
use crate::fuse_mount::ServerSample;
use crate::procstat::{self, Peaks};
use crate::row;
use std::path::Path;

fn sample(secs: f64, entries: u64, req: u64, cpu: f64, lookups: u64) -> PassSample {
    PassSample {
        secs,
        entries,
        server: Some(ServerSample {
            requests: req,
            by_op: [("lookup".to_string(), lookups)].into_iter().collect(),
            cpu_secs: cpu,
            forgotten: 0,
            nodes: 0,
        }),
        ..PassSample::default()
    }
}

#[test]
fn server_math_is_per_stat_and_per_request() {
    let ss = [
        sample(1.0, 1000, 500, 0.010, 400),
        sample(1.0, 1000, 700, 0.014, 600),
        sample(1.0, 1000, 600, 0.012, 500),
    ];
    let f = server_fields(&ss).unwrap();
    assert!((f["requests_per_stat"].as_f64().unwrap() - 0.6).abs() < 1e-9);
    assert!((f["cpu_us_per_request"].as_f64().unwrap() - 20.0).abs() < 1e-9);
    assert!((f["cpu_us_per_stat"].as_f64().unwrap() - 12.0).abs() < 1e-9);
    assert!((f["requests_per_stat_by_op"]["lookup"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    // A warm pass with no requests has no CPU per request.
    let warm = server_fields(&[sample(1.0, 1000, 0, 0.0, 0)]).unwrap();
    assert!(warm["cpu_us_per_request"].is_null());
    assert_eq!(warm["requests_per_stat"].as_f64(), Some(0.0));
    assert!(server_fields(&[PassSample {
        secs: 1.0,
        entries: 1,
        ..PassSample::default()
    }])
    .is_none());
}

#[test]
fn ratios_and_summary() {
    let mut r = Report::new("fuse-stat");
    for (fs, pass, v) in [
        (MEMFS, "warm", 90.0),
        (TMPFS, "warm", 100.0),
        (MEMFS, "cold", 10.0),
        (TMPFS, "cold", 100.0),
    ] {
        let mut x = row!("fs" => fs, "pass" => pass, "threads" => 1, "stats_per_sec" => v);
        if fs == MEMFS {
            x.insert("entry_timeout".into(), json!(60.0));
            x.insert("requests_per_stat".into(), json!(0.25));
            x.insert("cpu_us_per_request".into(), json!(8.0));
            x.insert("cpu_us_per_stat".into(), json!(2.0));
            x.insert(
                "requests_per_stat_by_op".into(),
                json!({"lookup": 0.2, "readdirplus": 0.05}),
            );
        }
        r.rows.push(x);
    }
    add_ratios(&mut r);
    assert_eq!(r.rows[0]["vs_tmpfs"].as_f64(), Some(0.9));
    assert_eq!(r.rows[2]["vs_tmpfs"].as_f64(), Some(0.1));
    let s = summary(&r).join("\n");
    assert!(
        s.contains("warm T=1: uvfs-memfs/tmpfs = 0.90x (target >= 0.8: met)"),
        "{s}"
    );
    assert!(s.contains("cold T=1: uvfs-memfs/tmpfs = 0.10x"), "{s}");
    assert!(
        s.contains("[per stat: lookup 0.200, readdirplus 0.050]"),
        "{s}"
    );
    assert!(s.contains("--entry-timeout 60"), "{s}");
    let (_, _, g) = chart(&r);
    assert_eq!(g.len(), 2);
}

#[test]
fn transports_compared_per_pass_and_thread_count() {
    let mut r = Report::new("fuse-stat");
    for (fs, t, v, transport) in [
        (MEMFS, 1, 150.0, "uring"),
        (MEMFS_DEV, 1, 100.0, "dev"),
        (MEMFS, 2, 300.0, "uring"),
        (MEMFS_DEV, 2, 250.0, "dev"),
    ] {
        r.rows.push(row!(
            "fs" => fs, "pass" => "warm", "threads" => t,
            "stats_per_sec" => v, "transport" => transport
        ));
    }
    let s = summary(&r).join("\n");
    assert!(
        s.contains("warm T=1: uvfs-memfs (uring) / uvfs-memfs-dev = 1.50x"),
        "{s}"
    );
    assert!(
        s.contains("warm T=2: uvfs-memfs (uring) / uvfs-memfs-dev = 1.20x"),
        "{s}"
    );
    assert!(!s.contains("cold T="), "{s}");
}

#[test]
fn fs_choice() {
    let mut o = FuseStatOpts {
        common: CommonOpts::default(),
        threads: vec![1],
        files: None,
        per_dir: 100,
        fs: None,
        timeout: 60.0,
        server_threads: None,
        native_dir: "/tmp".into(),
    };
    let none = MountFlags {
        source: false,
        no_watch: false,
    };
    let source = MountFlags {
        source: true,
        no_watch: false,
    };
    let all = MountFlags {
        source: true,
        no_watch: true,
    };
    let names = |o: &FuseStatOpts, m| choose_fs(o, m).map(|(n, _)| n);
    assert_eq!(names(&o, none).unwrap(), vec![MEMFS, MEMFS_DEV, TMPFS]);
    // The default-options passthroughs lead; the no-watch one only
    // where `uvfs mount` has the flag, else skipped with a message.
    let (n, skipped) = choose_fs(&o, source).unwrap();
    assert_eq!(
        n,
        vec![
            MEMFS,
            MEMFS_DEV,
            TMPFS,
            NATIVE,
            PASSTHROUGH_DEFAULT,
            PASSTHROUGH,
            LIBFUSE,
            FBR,
            FBR_FH,
            GOFUSE
        ]
    );
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].contains("--no-watch"), "{skipped:?}");
    let (n, skipped) = choose_fs(&o, all).unwrap();
    assert_eq!(
        &n[4..7],
        &[PASSTHROUGH_DEFAULT, PASSTHROUGH_NOWATCH, PASSTHROUGH]
    );
    assert!(skipped.is_empty());
    o.fs = Some(vec![PASSTHROUGH.into()]);
    assert!(choose_fs(&o, none).is_err());
    assert_eq!(names(&o, source).unwrap(), vec![NATIVE, PASSTHROUGH]);
    // The /dev/fuse and readahead-less passthroughs only when asked,
    // with their source tree.
    o.fs = Some(vec![PASSTHROUGH_NORA.into()]);
    assert_eq!(names(&o, source).unwrap(), vec![NATIVE, PASSTHROUGH_NORA]);
    o.fs = Some(vec![PASSTHROUGH_DEV.into()]);
    assert!(choose_fs(&o, none).is_err());
    assert_eq!(names(&o, source).unwrap(), vec![NATIVE, PASSTHROUGH_DEV]);
    // Asked for by name without the flag: skipped, not an error.
    o.fs = Some(vec![PASSTHROUGH_NOWATCH.into()]);
    let (n, skipped) = choose_fs(&o, source).unwrap();
    assert_eq!((n.len(), skipped.len()), (0, 1));
    // A peer alone brings the native tree it serves, and needs no
    // `uvfs mount --source`.
    o.fs = Some(vec![FBR.into()]);
    assert_eq!(names(&o, none).unwrap(), vec![NATIVE, FBR]);
    o.fs = Some(vec![GOFUSE.into(), FBR_FH.into()]);
    assert_eq!(names(&o, none).unwrap(), vec![NATIVE, FBR_FH, GOFUSE]);
    o.fs = Some(vec![LIBFUSE.into(), PASSTHROUGH.into()]);
    assert_eq!(
        names(&o, source).unwrap(),
        vec![NATIVE, PASSTHROUGH, LIBFUSE]
    );
    o.fs = Some(vec!["ext9".into()]);
    assert!(choose_fs(&o, source).is_err());
}

fn key(fs: &str, served: bool) -> RowKey<'_> {
    RowKey {
        fs,
        threads: 2,
        cold: true,
        files: 20_000,
        entries: 20_210,
        repeats: 3,
        build_secs: 0.5,
        served,
        fd_limit: served.then_some(20_000),
        fd_budget: (fs == PASSTHROUGH).then_some(15_000),
    }
}

fn walked(secs: f64, entries: u64, error: Option<&str>, fds: u64) -> PassSample {
    let mut peaks = Peaks::default();
    peaks.add(procstat::ProcUsage {
        fds,
        rss_bytes: fds * 1000,
        hwm_bytes: fds * 2000,
    });
    PassSample {
        secs,
        entries,
        error: error.map(String::from),
        peaks: Some(peaks),
        ..PassSample::default()
    }
}

#[test]
fn completed_row_has_rate_and_peaks() {
    let ss = [
        walked(2.0, 20_210, None, 100),
        walked(1.0, 20_210, None, 300),
        walked(3.0, 20_210, None, 200),
    ];
    let r = make_row(&key(PASSTHROUGH, true), None, &ss);
    assert_eq!(r["ok"], true);
    assert_eq!(r["seen"], 20_210);
    assert_eq!(r["secs"].as_f64(), Some(2.0));
    assert_eq!(r["stats_per_sec"].as_f64(), Some(10_105.0));
    assert_eq!(r["max_fds"], 300, "the peak over every repeat");
    assert_eq!(r["rss_bytes"], 300_000);
    assert_eq!(r["rss_hwm_bytes"], 600_000);
    assert_eq!(r["fd_limit"], 20_000);
    assert!(r["error"].is_null());
    assert!(r.get("failed_repeats").is_none());
    // Not served by a process: no fds, no RSS (null, not absent).
    let native = make_row(&key(NATIVE, false), None, &[walked(1.0, 20_210, None, 9)]);
    assert!(native["max_fds"].is_null() && native["rss_bytes"].is_null());
    assert!(native["fd_limit"].is_null());
    assert_eq!(native["ok"], true);
}

#[test]
fn failed_walks_make_a_failed_row() {
    let emfile = "walk /tmp/x/t0: Too many open files (os error 24)";
    let ss = [
        walked(0.5, 19_800, Some(emfile), 19_990),
        walked(1.0, 20_210, None, 10),
        walked(0.7, 19_850, Some(emfile), 20_000),
    ];
    let r = make_row(&key(LIBFUSE, true), None, &ss);
    assert_eq!(r["ok"], false);
    assert_eq!(r["seen"], 19_825, "median of the failed repeats");
    assert_eq!(r["secs"].as_f64(), Some(0.6));
    assert!(r["stats_per_sec"].is_null(), "a failed walk has no rate");
    assert_eq!(r["error"], emfile);
    assert_eq!(r["failed_repeats"], 2);
    assert_eq!(r["max_fds"], 20_000);
    // Fewer entries without an error is a failure too (see `pass`), and
    // a peer that never started is a row with the reason.
    let r = make_row(&key(FBR, true), Some("build failed: no cargo"), &[]);
    assert_eq!(r["ok"], false);
    assert_eq!(r["seen"], 0);
    assert!(r["secs"].is_null() && r["stats_per_sec"].is_null());
    assert!(r["max_fds"].is_null());
    assert_eq!(r["error"], "build failed: no cargo");
    assert!(r.get("failed_repeats").is_none());
}

#[test]
fn peers_in_ratios_and_summary() {
    let mut r = Report::new("fuse-stat");
    let emfile = "Too many open files (os error 24)";
    let rows = [
        make_row(&key(NATIVE, false), None, &[walked(1.0, 20_210, None, 0)]),
        make_row(
            &key(PASSTHROUGH, true),
            None,
            &[walked(2.0, 20_210, None, 15_000)],
        ),
        make_row(
            &key(LIBFUSE, true),
            None,
            &[walked(0.5, 19_800, Some(emfile), 20_000)],
        ),
        make_row(&key(FBR, true), None, &[walked(3.0, 20_210, None, 20_100)]),
    ];
    r.rows.extend(rows);
    let mut warm = |fs: &'static str, secs: f64| {
        let mut k = key(fs, fs != NATIVE);
        k.cold = false;
        r.rows
            .push(make_row(&k, None, &[walked(secs, 20_210, None, 7)]));
    };
    warm(NATIVE, 1.0);
    warm(PASSTHROUGH, 1.25);
    add_ratios(&mut r);
    assert_eq!(r.rows[1]["vs_native"].as_f64(), Some(0.5));
    assert!(
        r.rows[2].get("vs_native").is_none(),
        "failed rows get no ratio"
    );
    assert!((r.rows[3]["vs_native"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-9);
    let s = summary(&r).join("\n");
    assert!(
        s.contains("uvfs-passthrough cold vs best completing peer: 1.50x (target >= 1.2: met) [T=2: 10105 vs fuse-backend-rs 6737 stats/s]"),
        "{s}"
    );
    assert!(
        s.contains("uvfs-passthrough warm vs native: 0.80x (target >= 0.9: NOT met) [T=2]"),
        "{s}"
    );
    assert!(
        s.contains("libfuse-passthrough_ll cold T=2: FAILED after 19,800 of 20,210 entries, server peak 20000 fds (limit 20000): Too many open files"),
        "{s}"
    );
    assert!(
        s.contains("uvfs-passthrough: server peak 15000 fds (limit 20000; fd pool budget 15000)"),
        "{s}"
    );
    // When no peer completes there is nothing to hold uvfs against.
    r.rows.retain(|x| x["fs"] != FBR);
    let s = summary(&r).join("\n");
    assert!(
        s.contains(
            "uvfs-passthrough cold vs best completing peer: - (no peer completed the walk) [T=2]"
        ),
        "{s}"
    );
    // A peer that never ran is one line, however many rows it has.
    r.rows
        .push(make_row(&key(FBR, true), Some("no cargo"), &[]));
    r.rows
        .push(make_row(&key(FBR, true), Some("no cargo"), &[]));
    let s = summary(&r);
    assert_eq!(
        s.iter()
            .filter(|l| *l == "fuse-backend-rs: not run: no cargo")
            .count(),
        1
    );
    // Failed rows have no bar.
    let (_, _, g) = chart(&r);
    assert!(g
        .iter()
        .all(|g| g.bars.iter().all(|b| b.0 != LIBFUSE && b.0 != FBR)));
}

#[test]
fn default_rows_pass_no_timeouts_and_lead_the_summary() {
    let o = FuseStatOpts {
        common: CommonOpts::default(),
        threads: vec![1],
        files: None,
        per_dir: 100,
        fs: None,
        timeout: 60.0,
        server_threads: Some(3),
        native_dir: "/tmp".into(),
    };
    let shape = TreeShape {
        files: 10,
        subtrees: 1,
        per_dir: 10,
        fanout: 32,
    };
    let src = Some(Path::new("/src"));
    assert_eq!(
        server_args(&o, &shape, src, PASSTHROUGH_DEFAULT).join(" "),
        "--source /src"
    );
    assert_eq!(
        server_args(&o, &shape, src, PASSTHROUGH_NOWATCH).join(" "),
        "--source /src --no-watch"
    );
    let tuned = server_args(&o, &shape, src, PASSTHROUGH).join(" ");
    assert!(
        tuned.starts_with("--entry-timeout 60 --attr-timeout 60 --vnodes"),
        "{tuned}"
    );
    assert!(tuned.ends_with("--threads 3 --source /src"), "{tuned}");

    let mut r = Report::new("fuse-stat");
    let mut push = |fs: &str, pass: &str, rate: f64, rps: f64| {
        let mut x = row!("fs" => fs, "pass" => pass, "threads" => 1,
            "stats_per_sec" => rate, "requests_per_stat" => rps);
        match options_of(fs) {
            Some(opt) => x.insert("options".into(), json!(opt)),
            None => x.insert("entry_timeout".into(), json!(1.0)),
        };
        r.rows.push(x);
    };
    push(NATIVE, "warm", 1000.0, 0.0);
    push(PASSTHROUGH_DEFAULT, "warm", 950.0, 0.0);
    push(PASSTHROUGH_NOWATCH, "warm", 300.0, 1.02);
    push(GOFUSE, "warm", 150.0, 0.0);
    push(FBR_FH, "warm", 100.0, 0.0);
    add_ratios(&mut r);
    let s = summary(&r);
    let first = s
        .iter()
        .position(|l| l.starts_with(PASSTHROUGH_DEFAULT))
        .expect("a default line");
    assert_eq!(first, 1, "right after the timeouts line: {s:?}");
    let all = s.join("\n");
    assert!(
        all.contains("uvfs-passthrough-default warm T=1: 950 stats/s = 0.95x native; 0.000 requests/stat (target >= 0.9x native, 0 requests/stat: met)"),
        "{all}"
    );
    assert!(
        all.contains(
            "uvfs-passthrough-nowatch warm T=1: 300 stats/s = 0.30x native; 1.020 requests/stat"
        ),
        "{all}"
    );
    assert!(
        all.contains("uvfs-passthrough-nowatch warm vs best completing peer: 2.00x (target >= 1.5: met) [T=1: 300 vs go-fuse-loopback 150 stats/s, peers at timeout 1 s]"),
        "{all}"
    );
    assert!(all.contains("no timeout given"), "{all}");
}

#[test]
fn thousands_separators() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(19_800), "19,800");
    assert_eq!(thousands(1_234_567), "1,234,567");
}

#[test]
fn watchdog_kills_only_past_the_limit() {
    // No server: nothing to watch.
    assert_eq!(with_watchdog(None, Duration::ZERO, || 7), (7, false));
    // A child that outlives the limit is killed; one in time is not.
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let (r, killed) = with_watchdog(Some(child.id()), Duration::from_millis(50), || {
        child.wait().unwrap()
    });
    assert!(killed);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&r),
        Some(libc::SIGKILL)
    );
    let ((), killed) = with_watchdog(Some(std::process::id()), Duration::from_secs(60), || ());
    assert!(!killed);
}
