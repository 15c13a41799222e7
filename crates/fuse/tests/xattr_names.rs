//! Which extended attribute names a caller is shown: `trusted.*` only to
//! callers with `CAP_SYS_ADMIN`, as ext4 and tmpfs do. Through the kernel,
//! on memfs; skipped where FUSE cannot be mounted (or not as root, which
//! setting a `trusted.*` attribute and running as another user need).

mod common;

use common::{as_user, Mnt};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

fn set(p: &std::path::Path, name: &str) {
    let (c, n) = (
        CString::new(p.as_os_str().as_bytes()).unwrap(),
        CString::new(name).unwrap(),
    );
    // SAFETY: NUL-terminated strings and a 1-byte value.
    let rc = unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), b"1".as_ptr().cast(), 1, 0) };
    assert_eq!(rc, 0, "{name}: {}", std::io::Error::last_os_error());
}

#[test]
fn trusted_attribute_names_are_listed_to_the_capable_only() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: not root");
        return;
    }
    let Some(m) = Mnt::new(None) else { return };
    let f = m.p("f");
    std::fs::write(&f, b"").unwrap();
    set(&f, "trusted.secret");
    set(&f, "user.u");
    let listed = |as_root: bool, expect: &str| {
        let script = format!(
            "python3 -c \"import os,sys; l=sorted(os.listxattr('{}')); \
             sys.exit(0 if l == [{expect}] else print(l) or 1)\"",
            f.display()
        );
        if as_root {
            std::process::Command::new("sh")
                .args(["-c", &script])
                .status()
                .unwrap()
                .success()
        } else {
            as_user(&script)
        }
    };
    assert!(listed(true, "'trusted.secret', 'user.u'"), "root's list");
    assert!(listed(false, "'user.u'"), "a user's list");
}
