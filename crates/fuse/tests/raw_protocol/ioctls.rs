//! Targeted cases about inode-flag ioctls (chattr's requests), from
//! callers with and without the rights Linux asks.

use crate::kernel::Kernel;
use crate::wire::{
    b, release_in, u32_at, write_in, SetAttrIn, FATTR_UID, IOCTL, RELEASE, ROOT, SETATTR, WRITE,
};

// Inode-flag ioctls (include/uapi/linux/fs.h) and flags.
pub(crate) const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
pub(crate) const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
pub(crate) const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
pub(crate) const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
pub(crate) const FS_IMMUTABLE_FL: u32 = 0x10;
pub(crate) const FS_NODUMP_FL: u32 = 0x40;
pub(crate) const FS_XFLAG_IMMUTABLE: u32 = 0x8;
pub(crate) const FS_XFLAG_NODUMP: u32 = 0x80;

/// fuse_ioctl_in for `cmd` on handle `fh`, as `fuse_priv_ioctl` sends it:
/// `input` for a write-only command, `out_size` bytes asked back for a
/// read-only one.
pub(crate) fn ioctl_in(fh: u64, cmd: u32, input: &[u8], out_size: u32) -> Vec<u8> {
    b().u64(fh)
        .u32(0)
        .u32(cmd)
        .u64(0)
        .u32(input.len() as u32)
        .u32(out_size)
        .bytes(input)
        .done()
}

/// chattr's requests as the kernel sends them (`fuse_fileattr_get/set`),
/// from callers with and without the rights Linux asks: the file's owner
/// (or `CAP_FOWNER`) for any change, `CAP_LINUX_IMMUTABLE` to set or clear
/// immutable. The kernel checks both before it asks; a peer that is not a
/// kernel must meet the same refusals from the server. Then immutable is
/// enforced on a handle opened for writing before it was set.
pub(crate) fn inode_flags(k: &mut Kernel, memfs: bool) {
    let (f, fh) = k.create(ROOT, b"flags");
    let flags = |k: &mut Kernel| {
        let r = k.call(IOCTL, f, &ioctl_in(fh, FS_IOC_GETFLAGS, &[], 4));
        assert!(r.ok(), "GETFLAGS: errno {}", r.errno());
        u32_at(&r.body, 16)
    };
    let base = flags(k);
    if !memfs && base & FS_IMMUTABLE_FL != 0 {
        k.fail("a new source file is immutable");
    }
    let set = |k: &mut Kernel, v: u32| {
        k.call(
            IOCTL,
            f,
            &ioctl_in(fh, FS_IOC_SETFLAGS, &v.to_ne_bytes(), 0),
        )
    };
    let (root_uid, root_pid) = (k.uid, k.pid);
    let as_user = |k: &mut Kernel, uid: u32| {
        k.uid = uid;
        k.pid = 0;
    };
    // Not the owner (root owns it), no capabilities: no change at all.
    as_user(k, 1000);
    let r = set(k, base | FS_NODUMP_FL);
    assert_eq!(r.errno(), libc::EPERM, "SETFLAGS by a stranger");
    // Its owner now, still without CAP_LINUX_IMMUTABLE.
    (k.uid, k.pid) = (root_uid, root_pid);
    let chown = SetAttrIn {
        valid: FATTR_UID,
        uid: 1000,
        ..Default::default()
    };
    assert!(k.call(SETATTR, f, &chown.body()).ok(), "chown");
    as_user(k, 1000);
    let r = set(k, base | FS_IMMUTABLE_FL);
    assert_eq!(r.errno(), libc::EPERM, "SETFLAGS +i without the capability");
    let r = set(k, base | FS_NODUMP_FL);
    assert!(r.ok(), "SETFLAGS +d by the owner: errno {}", r.errno());
    (k.uid, k.pid) = (root_uid, root_pid);
    assert_eq!(flags(k), base | FS_NODUMP_FL);
    // Root (CAP_LINUX_IMMUTABLE, read from its status) sets immutable:
    // from then on even the handle opened for writing before fails.
    assert!(set(k, base | FS_NODUMP_FL | FS_IMMUTABLE_FL).ok(), "+i");
    let r = k.call(IOCTL, f, &ioctl_in(fh, FS_IOC_FSGETXATTR, &[], 28));
    assert!(r.ok(), "FSGETXATTR: errno {}", r.errno());
    let x = u32_at(&r.body, 16);
    assert_eq!(
        x & (FS_XFLAG_IMMUTABLE | FS_XFLAG_NODUMP),
        FS_XFLAG_IMMUTABLE | FS_XFLAG_NODUMP,
        "xflags {x:#x}"
    );
    k.expect_err(WRITE, f, &write_in(fh, 0, b"no"), &[libc::EPERM]);
    // Cleared through the other form; writes work again.
    let mut fsx = r.body[16..16 + 28].to_vec();
    fsx[..4].copy_from_slice(&(x & !FS_XFLAG_IMMUTABLE).to_ne_bytes());
    let r = k.call(IOCTL, f, &ioctl_in(fh, FS_IOC_FSSETXATTR, &fsx, 0));
    assert!(r.ok(), "FSSETXATTR -i: errno {}", r.errno());
    assert_eq!(flags(k) & FS_IMMUTABLE_FL, 0);
    assert!(
        k.call(WRITE, f, &write_in(fh, 0, b"yes")).ok(),
        "write after -i"
    );
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
}
