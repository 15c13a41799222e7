//! Targeted cases a kernel never sends: truncated bodies, opcodes the
//! server lacks, requests out of order; and `sane`, the ordinary
//! sequence that must still work after them.

use crate::kernel::Kernel;
use crate::wire::{
    access_in, b, batch_forget_in, create_in, fallocate_in, flush_in, forget_in, fsync_in,
    getattr_in, getxattr_in, interrupt_in, link_in, lk_in, lseek_in, mkdir_in, mknod_in, op_name,
    open_in, read_in, release_in, rename_in, setxattr_in, u32_at, write_in, CopyIn, SetAttrIn,
    ACCESS, BATCH_FORGET, BMAP, COPY_FILE_RANGE, CREATE, EBADF, EINVAL, ENOSYS, FALLOCATE, FLUSH,
    FORGET, FSYNC, GETATTR, GETLK, GETXATTR, HEADER, INIT, INTERRUPT, IOCTL, LINK, LSEEK, MKDIR,
    MKNOD, OPEN, POLL, READ, READDIR, RELEASE, RENAME, RMDIR, ROOT, SETATTR, SETLK, SETXATTR,
    UNKNOWN_OPS, UNLINK, WRITE,
};

pub(crate) fn odd_requests(k: &mut Kernel) {
    // Opcodes the server does not implement: an errno, nothing else.
    for op in UNKNOWN_OPS {
        k.expect_err(op, ROOT, &[0; 64], &[ENOSYS]);
    }
    // Locks: memfs leaves them to the kernel (ENOSYS); passthrough keeps
    // them, and refuses one through no handle (ENOLCK) or one it never
    // gave out (EBADF).
    k.expect_err(GETLK, ROOT, &lk_in(0), &[ENOSYS, libc::ENOLCK]);
    k.expect_err(SETLK, ROOT, &lk_in(0), &[ENOSYS, libc::ENOLCK]);
    k.expect_err(SETLK, ROOT, &lk_in(u64::MAX), &[ENOSYS, EBADF]);
    k.expect_err(BMAP, ROOT, &b().u64(0).u32(4096).u32(0).done(), &[ENOSYS]);
    k.expect_err(
        IOCTL,
        ROOT,
        &b().u64(0).u32(0).u32(0x5401).u64(0).u32(0).u32(0).done(),
        &[libc::ENOTTY],
    );
    k.expect_err(
        POLL,
        ROOT,
        &b().u64(0).u64(0).u32(0).u32(0).done(),
        &[ENOSYS],
    );
    // A second INIT after the handshake.
    k.expect_err(
        INIT,
        0,
        &b().u32(7)
            .u32(31)
            .u32(0)
            .u32(0)
            .u32(0)
            .bytes(&[0; 44])
            .done(),
        &[libc::EIO, EINVAL, libc::EPROTO],
    );
    // INTERRUPT (of nothing in flight): any answer, or none.
    let target = k.unique + 2;
    let unique = k.next_unique() | 1;
    let msg = k.message(
        INTERRUPT,
        unique,
        0,
        (HEADER + 8) as u32,
        &interrupt_in(target),
    );
    k.note(format!("INTERRUPT of {target}"));
    k.send_raw(&msg);
    k.drain_until_statfs(unique, "INTERRUPT");
    k.maybe_reply(INTERRUPT, 0, &interrupt_in(u64::MAX));
    // Bodies shorter than the request's struct: an errno (fuser cannot
    // parse them), never a handler called with garbage.
    let fuller: [(u32, Vec<u8>); 22] = [
        (FORGET, forget_in(1)),
        (GETATTR, getattr_in(None)),
        (SETATTR, SetAttrIn::default().body()),
        (MKNOD, mknod_in(0o644, 0, b"x")),
        (MKDIR, mkdir_in(0o755, b"x")),
        (RENAME, rename_in(ROOT, b"a", b"b")),
        (LINK, link_in(ROOT, b"x")),
        (OPEN, open_in(0)),
        (READ, read_in(1, 0, 1)),
        (WRITE, write_in(1, 0, b"")),
        (RELEASE, release_in(1)),
        (FSYNC, fsync_in(1, 0)),
        (SETXATTR, setxattr_in(0, b"user.a", b"")),
        (GETXATTR, getxattr_in(0, b"user.a")),
        (FLUSH, flush_in(1)),
        (READDIR, read_in(0, 0, 100)),
        (ACCESS, access_in(0)),
        (CREATE, create_in(0, 0o644, b"x")),
        (BATCH_FORGET, batch_forget_in(&[(ROOT, 1)])),
        (FALLOCATE, fallocate_in(1, 0, 1, 0)),
        (LSEEK, lseek_in(1, 0, 3)),
        (
            COPY_FILE_RANGE,
            CopyIn {
                fh_in: 1,
                off_in: 0,
                nodeid_out: 1,
                fh_out: 1,
                off_out: 0,
                len: 1,
                flags: 0,
            }
            .body(),
        ),
    ];
    for (op, body) in fuller {
        for cut in [0, 1, 4, 7] {
            if cut >= body.len() {
                continue;
            }
            let short = &body[..cut];
            let r = k.maybe_reply(op, ROOT, short);
            if let Some(r) = r {
                if r.ok() {
                    k.fail(&format!("{} with {cut} body bytes succeeded", op_name(op)));
                }
            }
        }
    }
    // BATCH_FORGET claiming more entries than it carries.
    let mut lie = batch_forget_in(&[(ROOT, 1)]);
    lie[0..4].copy_from_slice(&1000u32.to_le_bytes());
    k.maybe_reply(BATCH_FORGET, 0, &lie);
    let mut lie = batch_forget_in(&[]);
    lie[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    k.maybe_reply(BATCH_FORGET, 0, &lie);
    // Trailing junk after a well-formed body is ignored.
    let mut junk = getattr_in(None);
    junk.extend_from_slice(&[0xff; 100]);
    assert!(k.call(GETATTR, ROOT, &junk).ok());
    // A header shorter than the message: only `len` bytes count.
    let body = getattr_in(None);
    let r = k.maybe_reply_raw(GETATTR, ROOT, (HEADER + 4) as u32, &body);
    assert!(
        matches!(r, Some(ref r) if !r.ok()),
        "GETATTR cut by its header: {r:?}"
    );
}

/// The sequence a kernel sends for mkdir, echo > file, cat, rm.
pub(crate) fn sane(k: &mut Kernel, tag: &[u8]) {
    let d = k.mkdir(ROOT, tag);
    assert!(d.ok(), "MKDIR after the storm: {}", d.errno());
    let d = d.nodeid();
    let (f, fh) = k.create(d, b"file");
    let data = b"hello, world\n".repeat(1000);
    let r = k.call(WRITE, f, &write_in(fh, 0, &data));
    assert!(
        r.ok() && u32_at(&r.body, 0) as usize == data.len(),
        "WRITE: {r:?}"
    );
    let r = k.call(READ, f, &read_in(fh, 0, 1 << 20));
    assert_eq!(r.body, data, "READ back");
    assert_eq!(k.size_of(f), data.len() as u64);
    assert!(k.call(FLUSH, f, &flush_in(fh)).ok());
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
    assert!(k.list(d).contains(&b"file"[..]));
    let r = k.call(UNLINK, d, &b().name(b"file").done());
    assert!(r.ok(), "UNLINK: {}", r.errno());
    assert!(!k.list(d).contains(&b"file"[..]));
    k.no_reply(FORGET, f, &forget_in(1));
    assert!(k.call(RMDIR, ROOT, &b().name(tag).done()).ok());
    k.no_reply(FORGET, d, &forget_in(1));
    k.settle();
}
