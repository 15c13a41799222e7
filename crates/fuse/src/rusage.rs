//! Resource usage of this process or thread (`getrusage`, which rustix
//! does not wrap): CPU time for `stats.rs`, voluntary context switches for
//! `write_stall.rs`.

/// The resource usage of this process (`RUSAGE_SELF`) or thread
/// (`RUSAGE_THREAD`); `None` for any other `who` (rustix has no
/// getrusage).
pub(crate) fn rusage(who: libc::c_int) -> Option<libc::rusage> {
    if who != libc::RUSAGE_SELF && who != libc::RUSAGE_THREAD {
        return None;
    }
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct,
    // `who` is one the kernel knows, so getrusage only writes `ru`.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        (libc::getrusage(who, &mut ru) == 0).then_some(ru)
    }
}
