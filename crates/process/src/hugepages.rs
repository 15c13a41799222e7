//! The `uvfs` process's transparent-huge-page policy: off for its heap.
//!
//! mimalloc asks for huge pages on its arenas (`MADV_HUGEPAGE`), so on a
//! kernel whose THP mode is `madvise` or `always` every fresh 2 MiB of
//! heap is cleared whole by the first small allocation that touches it.
//! A vnode cache growing to hundreds of thousands of 80-byte vnodes and
//! name-cache entries touches fresh heap on nearly every allocation, and
//! on a guest whose freed memory its host takes back that clearing is
//! where a walk's time goes (`clear_page_erms` under
//! `do_huge_pmd_anonymous_page`), and two walkers faulting huge pages at
//! once pay more per stat than one. memfs's file pages are heap too.
//! The measurements are in docs/results.md (seed 000).
//!
//! `PR_SET_THP_DISABLE` is the process-wide switch (mimalloc's own
//! `allow_thp` option is read before `main`, from the environment, and
//! does the same prctl). It is inherited across fork and exec, so the
//! benchmarks' peers get the setting the `uvfs` process itself was started
//! with ([`as_inherited`]): they must run as they would on their own.
//!
//! `UVFS_THP=1` keeps huge pages (for measuring the other side).

use rustix::thread::{disable_transparent_huge_pages, transparent_huge_pages_are_disabled};
use std::sync::atomic::{AtomicI32, Ordering};

/// The THP-disable flag the process was started with: -1 before
/// [`apply`], else 0 or 1 (PR_GET_THP_DISABLE's answer).
static INHERITED: AtomicI32 = AtomicI32::new(-1);

/// Environment switch that keeps transparent huge pages on.
pub const KEEP_ENV: &str = "UVFS_THP";

/// Turns transparent huge pages off for this process (unless `UVFS_THP=1`),
/// remembering the inherited setting for children. Call first thing in
/// `main`: memory mapped before it keeps whatever it had. Returns whether
/// THP is now off for the process.
pub fn apply() -> bool {
    let was = flag();
    if was < 0 {
        return false; // a kernel without THP: nothing to turn off
    }
    INHERITED.store(was, Ordering::Relaxed);
    if std::env::var_os(KEEP_ENV).is_some_and(|v| v != "0") {
        return was == 1;
    }
    disable_transparent_huge_pages(true).is_ok()
}

/// Whether THP is off for this process now.
pub fn disabled() -> bool {
    flag() == 1
}

/// The process's THP-disable flag: 1 off, 0 on, -1 if the kernel has no
/// such switch.
fn flag() -> libc::c_int {
    match transparent_huge_pages_are_disabled() {
        Ok(off) => libc::c_int::from(off),
        Err(_) => -1,
    }
}

/// Makes `cmd`'s child start with the THP setting this process inherited,
/// not the one [`apply`] chose for it.
pub fn as_inherited(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    let was = INHERITED.load(Ordering::Relaxed);
    if was < 0 {
        return cmd;
    }
    // SAFETY: the closure runs in the child between fork and exec and
    // calls only prctl, which is async-signal-safe and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_THP_DISABLE, was as libc::c_ulong, 0, 0, 0);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The child of `as_inherited` sees the inherited flag, not ours. Run
    /// in a forked child of its own so this test's prctl cannot leak into
    /// the other tests of the binary.
    #[test]
    fn children_get_the_inherited_setting_back() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "hugepages::tests::child_side",
                "--ignored",
                "--nocapture",
            ])
            .env("UVFS_HUGEPAGES_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("child-checked"), "{text}");
    }

    #[test]
    #[ignore = "the child half of children_get_the_inherited_setting_back"]
    fn child_side() {
        assert!(
            std::env::var_os("UVFS_HUGEPAGES_CHILD").is_some(),
            "run by children_get_the_inherited_setting_back only"
        );
        if flag() < 0 {
            println!("child-checked (no THP here)");
            return;
        }
        disable_transparent_huge_pages(false).unwrap();
        INHERITED.store(-1, Ordering::Relaxed);
        assert!(apply(), "THP could not be turned off");
        assert!(disabled());
        let flag = |cmd: &mut std::process::Command| {
            let out = cmd
                .args(["-c", "grep THP_enabled /proc/self/status"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        // A plain child inherits "off"; one made `as_inherited` gets "on".
        assert_eq!(
            flag(&mut std::process::Command::new("sh")),
            "THP_enabled:\t0"
        );
        assert_eq!(
            flag(as_inherited(&mut std::process::Command::new("sh"))),
            "THP_enabled:\t1"
        );
        println!("child-checked");
    }
}
