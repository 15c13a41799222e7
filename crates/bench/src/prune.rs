//! `uvfs bench prune`: seed 001 reproduced. One cache holds a "zfs" mount
//! and a "tmpfs" mount. Half the population is tmpfs vnodes, half zfs
//! vnodes held by an upper layer (as nullfs or cached pages hold them). An
//! ARC-like byte budget on zfs calls `prune(zfs, n)` whenever new zfs
//! vnodes push it over. Between prunes the other activity of a busy
//! machine goes on: tmpfs files are used and released, held zfs vnodes are
//! dropped and taken again. We count what each prune examined against what
//! it freed, and its CPU time per vnode freed, at two population sizes.

use crate::cache::{Cache, OnReclaim, Uvfs};
use crate::cputime::thread_cpu;
use crate::report::{median, push_bar, BarGroup, Progress, Report};

/// How much uvfs's CPU per recycled vnode may grow from the smallest to
/// the largest cache.
const CPU_GROWTH_TARGET: f64 = 1.3;
/// Attempts per recycled vnode uvfs may make.
const ATTEMPTS_TARGET: f64 = 1.1;
use crate::{row, CommonOpts};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct PruneOpts {
    #[command(flatten)]
    pub common: CommonOpts,
    /// Population sizes (vnodes), at least two, 10x apart by default.
    #[arg(long, value_delimiter = ',', value_parser = crate::at_least_one())]
    pub vnodes: Vec<usize>,
    /// Implementations to run.
    #[arg(long, value_delimiter = ',', default_values_t = vec!["uvfs".to_string(), "freebsd".to_string()])]
    pub impls: Vec<String>,
    /// Prune rounds per run.
    #[arg(long, default_value_t = 20, value_parser = crate::at_least_one())]
    pub rounds: usize,
}

/// Bytes of ARC metadata one zfs vnode pins (dnode + znode + buffers).
const ARC_PER_VNODE: i64 = 1024;

struct Outcome {
    secs: f64,
    attempts: u64,
    recycled: u64,
    prune_cpu_ns: u64,
    created: u64,
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn run_once<C: Cache>(c: C, pop: usize, rounds: usize) -> Outcome {
    let arc = Arc::new(AtomicI64::new(0));
    let a2 = arc.clone();
    let on_reclaim: OnReclaim = Arc::new(move |_ino| {
        a2.fetch_sub(ARC_PER_VNODE, Ordering::Relaxed);
    });
    let zfs = c.mount("zfs", Some(on_reclaim));
    let tmpfs = c.mount("tmpfs", None);
    // Population, interleaved in creation order as a busy system would
    // create them: half tmpfs (free), half zfs held by an upper layer.
    let half = (pop / 2) as u64;
    let mut held: Vec<Option<C::Hold>> = Vec::with_capacity(half as usize);
    for i in 0..half {
        drop(c.get(&tmpfs, i, false, || ()));
        let z = c.get(&zfs, i, false, || ());
        arc.fetch_add(ARC_PER_VNODE, Ordering::Relaxed);
        held.push(Some(C::hold(&z)));
    }
    let budget = arc.load(Ordering::Relaxed);
    let batch = (pop / 1000).max(10) as u64;
    let churn = (pop / 10).max(10);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next_zfs = half;
    let (attempts0, mut recycled, mut cpu, mut created) = (c.prune_attempts(), 0u64, 0u64, 0u64);
    let start = Instant::now();
    for _ in 0..rounds {
        // The rest of the machine: tmpfs files used, held zfs vnodes
        // dropped and retaken (each a trip through "free").
        for _ in 0..churn {
            let i = xorshift(&mut rng) % half;
            drop(c.get(&tmpfs, i, false, || ()));
            let j = (xorshift(&mut rng) % half) as usize;
            if let Some(h) = held[j].take() {
                drop(h);
                let z = c.get(&zfs, j as u64, false, || ());
                held[j] = Some(C::hold(&z));
            }
        }
        // New zfs files read: ARC grows past its budget.
        for _ in 0..batch {
            drop(c.get(&zfs, next_zfs, false, || ()));
            arc.fetch_add(ARC_PER_VNODE, Ordering::Relaxed);
            next_zfs += 1;
            created += 1;
        }
        // arc_prune: ask the VFS for enough zfs vnodes to get back under.
        let over = arc.load(Ordering::Relaxed) - budget;
        if over > 0 {
            let want = (over / ARC_PER_VNODE) as usize;
            let t0 = thread_cpu();
            recycled += c.prune(&zfs, want);
            cpu += (thread_cpu() - t0).as_nanos() as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Outcome {
        secs,
        attempts: c.prune_attempts() - attempts0,
        recycled,
        prune_cpu_ns: cpu,
        created,
    }
}

fn run_impl(name: &str, pop: usize, rounds: usize) -> Option<Outcome> {
    // A limit well above the population: only prune recycles.
    let limit = pop * 4;
    Some(match name {
        "uvfs" => run_once(Uvfs::new(limit), pop, rounds),
        "freebsd" => run_once(crate::freebsd::Replica::new(limit, false), pop, rounds),
        "freebsd-pre" => run_once(crate::freebsd::Replica::new(limit, true), pop, rounds),
        _ => return None,
    })
}

pub fn run(o: &PruneOpts) -> std::io::Result<Report> {
    let pops = if o.vnodes.is_empty() {
        if o.common.quick {
            vec![20_000, 200_000]
        } else {
            vec![100_000, 1_000_000]
        }
    } else {
        o.vnodes.clone()
    };
    let repeats = if o.common.quick {
        1
    } else {
        o.common.repeats.max(1)
    };
    let rounds = if o.common.quick {
        o.rounds.min(8)
    } else {
        o.rounds
    };
    for i in &o.impls {
        if !["uvfs", "freebsd", "freebsd-pre"].contains(&i.as_str()) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("unknown implementation {i:?} (uvfs, freebsd, freebsd-pre)"),
            ));
        }
    }
    let mut report = Report::new("prune");
    let mut prog = Progress::new(pops.len() * o.impls.len() * repeats);
    for &pop in &pops {
        let mut samples: Vec<Vec<Outcome>> = (0..o.impls.len()).map(|_| Vec::new()).collect();
        for _ in 0..repeats {
            for (k, name) in o.impls.iter().enumerate() {
                prog.step(&format!("prune {name} vnodes={pop}"));
                samples[k].push(run_impl(name, pop, rounds).expect("checked"));
            }
        }
        for (k, name) in o.impls.iter().enumerate() {
            let s = &samples[k];
            let med = |f: &dyn Fn(&Outcome) -> f64| median(&s.iter().map(f).collect::<Vec<_>>());
            let attempts = med(&|x| x.attempts as f64);
            let recycled = med(&|x| x.recycled as f64);
            let secs = med(&|x| x.secs);
            report.rows.push(row!(
                "impl" => name, "threads" => 1, "vnodes" => pop,
                "attempts" => attempts, "recycled" => recycled,
                "attempts_per_recycled" => attempts / recycled.max(1.0),
                "cpu_ns_per_recycled" => med(&|x| x.prune_cpu_ns as f64 / (x.recycled.max(1)) as f64),
                "secs" => secs, "ops_per_sec" => med(&|x| x.created as f64 / x.secs),
                "repeats" => repeats,
            ));
        }
    }
    prog.finish();
    Ok(report)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

pub fn summary(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let impls: Vec<String> = {
        let mut v: Vec<String> = r
            .rows
            .iter()
            .filter_map(|x| x["impl"].as_str().map(String::from))
            .collect();
        v.dedup();
        v.sort();
        v.dedup();
        v
    };
    for imp in impls {
        let rows: Vec<_> = r
            .rows
            .iter()
            .filter(|x| x["impl"] == imp.as_str())
            .collect();
        for x in &rows {
            out.push(format!(
                "{imp} at {} vnodes: {:.2} attempts per recycled vnode{}",
                x["vnodes"],
                x["attempts_per_recycled"].as_f64().unwrap_or(0.0),
                if imp == "uvfs" {
                    let a = x["attempts_per_recycled"].as_f64().unwrap_or(f64::INFINITY);
                    format!(
                        " (target <= {ATTEMPTS_TARGET}: {}; FreeBSD in seed 001: ~960)",
                        verdict(a <= ATTEMPTS_TARGET)
                    )
                } else {
                    String::new()
                }
            ));
        }
        if let (Some(a), Some(b)) = (rows.first(), rows.last()) {
            if rows.len() >= 2 {
                let ca = a["cpu_ns_per_recycled"].as_f64().unwrap_or(0.0);
                let cb = b["cpu_ns_per_recycled"].as_f64().unwrap_or(0.0);
                out.push(format!(
                    "{imp}: CPU per recycled vnode grows {:.2}x from {} to {} vnodes{}",
                    cb / ca.max(1e-9),
                    a["vnodes"],
                    b["vnodes"],
                    if imp == "uvfs" {
                        format!(
                            " (target <= {CPU_GROWTH_TARGET}: {})",
                            verdict(cb / ca.max(1e-9) <= CPU_GROWTH_TARGET)
                        )
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    out
}

/// CPU per recycled vnode per limit; the target (uvfs at the largest
/// limit within 1.3x of the smallest) is marked on uvfs's last bar.
pub fn chart(r: &Report) -> (String, String, Vec<BarGroup>) {
    let mut groups: Vec<BarGroup> = Vec::new();
    for x in &r.rows {
        push_bar(
            &mut groups,
            format!("{} vnodes", x["vnodes"]),
            x["impl"].as_str().unwrap_or("?").to_string(),
            x["cpu_ns_per_recycled"].as_f64().unwrap_or(0.0),
        );
    }
    if groups.len() >= 2 {
        if let Some(first) = groups[0].value("uvfs") {
            if let Some(last) = groups.last_mut() {
                last.target(Some("uvfs"), CPU_GROWTH_TARGET * first);
            }
        }
    }
    (
        "prune: CPU ns per recycled vnode (lower is better)".into(),
        "ns".into(),
        groups,
    )
}
