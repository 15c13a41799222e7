//! Whether this process holds CAP_SYS_ADMIN, which several kernel features
//! a server can use ask for (FUSE passthrough's backing files, cloning its
//! own mount, fanotify on a file system): without it they are turned off
//! up front, with one line each, instead of failing request by request.

/// CAP_SYS_ADMIN's bit in the capability sets.
const CAP_SYS_ADMIN: u32 = 21;

/// Whether the effective set in `/proc/self/status` text has the
/// capability `bit`.
fn effective_has(status: &str, bit: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << bit) != 0)
}

/// Whether this process has CAP_SYS_ADMIN in its effective set (in its
/// own user namespace; unknown counts as no).
pub fn has_cap_sys_admin() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| effective_has(&s, CAP_SYS_ADMIN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_effective_set() {
        let root = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let user = "CapPrm:\t000001ffffffffff\nCapEff:\t0000000000000000\n";
        assert!(effective_has(root, CAP_SYS_ADMIN));
        assert!(!effective_has(user, CAP_SYS_ADMIN));
        assert!(!effective_has("CapEff:\tzz\n", CAP_SYS_ADMIN));
        assert!(!effective_has("", CAP_SYS_ADMIN));
    }
}
