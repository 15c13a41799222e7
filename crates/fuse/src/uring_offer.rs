//! Whether a mount with default options gets FUSE over io_uring.
//!
//! Kernels from 6.14 serve FUSE over io_uring, but only while the `fuse`
//! module's `enable_uring` parameter is on, and distributions ship it off.
//! Through /dev/fuse every request wakes the server on another CPU and
//! the caller again on its way back; an io_uring queue per CPU answers on
//! the caller's CPU. So a mount that asks for nothing turns the switch on
//! when it may (root), and otherwise says once what the user loses and
//! the one command that fixes it.
//!
//! The switch only lets servers ask for io_uring at their INIT: servers
//! that do not ask are untouched, so it is left on (turning it back off
//! after INIT would race another server's INIT starting meanwhile).

use std::io;

/// Where the kernel's switch lives.
pub const URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// What [`offer_uring`] found or did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UringOffer {
    /// The kernel offers FUSE over io_uring already.
    Available,
    /// The switch was off; this process turned it on.
    TurnedOn,
    /// The switch is off and this process may not turn it on.
    NeedsRoot,
    /// This kernel has no FUSE over io_uring (older than 6.14, or built
    /// without it).
    Unsupported,
}

impl UringOffer {
    /// Whether a mount may ask for io_uring now.
    pub fn usable(self) -> bool {
        matches!(self, UringOffer::Available | UringOffer::TurnedOn)
    }

    /// One line for the log and `uvfs stat`, or `None` when there is
    /// nothing to say (io_uring was on already).
    pub fn message(self) -> Option<String> {
        match self {
            UringOffer::Available => None,
            UringOffer::TurnedOn => Some(format!(
                "turned FUSE over io_uring on for this kernel ({URING_PARAMETER} was N, now Y)"
            )),
            UringOffer::NeedsRoot => Some(format!(
                "serving through /dev/fuse: this kernel offers FUSE over io_uring, which answers \
                 each request on the caller's CPU (several times fewer round-trip costs), but \
                 its switch is off; turn it on with `echo Y | sudo tee {URING_PARAMETER}`"
            )),
            UringOffer::Unsupported => None,
        }
    }
}

/// What this process's [`offer_uring`] found, for `uvfs stat`.
static OFFERED: std::sync::OnceLock<UringOffer> = std::sync::OnceLock::new();

/// Makes FUSE over io_uring available if the kernel has it and this
/// process may switch it on. The answer is kept for the statistics that
/// `uvfs stat` shows.
pub fn offer_uring() -> UringOffer {
    let o = offer_at(std::path::Path::new(URING_PARAMETER));
    let _ = OFFERED.set(o);
    o
}

/// What [`offer_uring`] found in this process, if it was asked.
pub fn offered() -> Option<UringOffer> {
    OFFERED.get().copied()
}

/// `uvfs stat`'s io_uring counters: whether the kernel agreed to it
/// (`on`, from the server's INIT) and what [`offer_uring`] found.
pub(crate) fn report(on: bool, out: &mut crate::report::Report) {
    out.put(
        "fuse.uring",
        u64::from(on),
        "1: the kernel agreed to FUSE over io_uring (requests may still use /dev/fuse until every CPU's queue is up)",
    );
    if let Some(offer) = offered() {
        out.put(
            "fuse.uring.switch_off",
            u64::from(offer == UringOffer::NeedsRoot),
            "1: this kernel offers FUSE over io_uring, which answers each request on the caller's CPU, but its switch is off and only root may turn it on: `echo Y | sudo tee /sys/module/fuse/parameters/enable_uring`, then mount again",
        );
        out.put(
            "fuse.uring.switched_on",
            u64::from(offer == UringOffer::TurnedOn),
            "1: the switch for FUSE over io_uring was off and this mount turned it on (/sys/module/fuse/parameters/enable_uring)",
        );
    }
}

fn offer_at(param: &std::path::Path) -> UringOffer {
    let Ok(now) = std::fs::read_to_string(param) else {
        return UringOffer::Unsupported;
    };
    if now.trim() == "Y" {
        return UringOffer::Available;
    }
    match std::fs::write(param, "Y") {
        Ok(()) if read_is_on(param) => UringOffer::TurnedOn,
        Ok(()) => UringOffer::Unsupported,
        Err(e) if denied(&e) => UringOffer::NeedsRoot,
        Err(_) => UringOffer::Unsupported,
    }
}

fn read_is_on(param: &std::path::Path) -> bool {
    std::fs::read_to_string(param).is_ok_and(|s| s.trim() == "Y")
}

fn denied(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(content: &str) -> (tempdir::Dir, std::path::PathBuf) {
        let d = tempdir::Dir::new();
        let p = d.0.join("enable_uring");
        std::fs::write(&p, content).unwrap();
        (d, p)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "uvfs-uring-offer-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn an_off_switch_is_turned_on_where_writable() {
        let (_d, p) = param("N\n");
        assert_eq!(offer_at(&p), UringOffer::TurnedOn);
        assert_eq!(std::fs::read_to_string(&p).unwrap().trim(), "Y");
        // Said once: the next mount finds it on.
        assert_eq!(offer_at(&p), UringOffer::Available);
        assert!(UringOffer::TurnedOn.message().is_some());
        assert!(UringOffer::Available.message().is_none());
    }

    #[test]
    fn a_missing_switch_means_no_io_uring() {
        let d = tempdir::Dir::new();
        let p = d.0.join("absent");
        assert_eq!(offer_at(&p), UringOffer::Unsupported);
        assert!(!UringOffer::Unsupported.usable());
    }

    #[test]
    fn a_switch_this_process_may_not_write_says_how_to_fix_it() {
        if rustix::process::geteuid().is_root() {
            // Root writes through any mode bits: check the message only.
            let m = UringOffer::NeedsRoot.message().unwrap();
            assert!(m.contains(URING_PARAMETER) && m.contains("tee"), "{m}");
            return;
        }
        let (_d, p) = param("N\n");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o444)).unwrap();
        assert_eq!(offer_at(&p), UringOffer::NeedsRoot);
    }
}
