//! Whether this process holds CAP_SYS_ADMIN, which several kernel features
//! a server can use ask for (FUSE passthrough's backing files, cloning its
//! own mount, fanotify on a file system): without it they are turned off
//! up front, with one line each, instead of failing request by request.

use crate::caller_caps::{effective, CAP_SYS_ADMIN};

/// Whether this process has CAP_SYS_ADMIN in its effective set (in its
/// own user namespace; unknown counts as no).
pub fn has_cap_sys_admin() -> bool {
    effective(None).is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// `CAP_DAC_READ_SEARCH`: among much else, `open_by_handle_at`.
const CAP_DAC_READ_SEARCH: u32 = 2;

/// Whether this process has CAP_DAC_READ_SEARCH in its effective set,
/// which opening files by handle needs (unknown counts as no).
pub fn has_cap_dac_read_search() -> bool {
    effective(None).is_some_and(|caps| caps & (1 << CAP_DAC_READ_SEARCH) != 0)
}
