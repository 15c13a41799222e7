//! CPU time of the calling thread, for "CPU per recycled vnode": wall time
//! on a shared 2-core machine would charge us for other processes.

use std::time::Duration;

/// CPU time consumed by the calling thread so far.
pub fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time consumed by the whole process so far (every thread, the
/// background reclaimer's included).
pub fn process_cpu() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// Page faults the whole process has taken so far that needed no I/O
/// (minor faults: fresh heap, mostly). A walk that faults in its memory
/// pays the kernel's page clearing and, in a guest, the host's backing of
/// the page; counting them tells such a run from a slow cache.
pub fn process_minor_faults() -> u64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_minflt as u64
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both CPU clocks we pass
    // are supported on Linux.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_time_advances_with_work() {
        let a = super::thread_cpu();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(super::thread_cpu() > a);
    }

    #[test]
    fn touching_fresh_memory_counts_faults() {
        let before = super::process_minor_faults();
        let mut v = vec![0u8; 64 << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        assert!(super::process_minor_faults() > before);
    }
}
