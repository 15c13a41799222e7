//! Targeted cases about node ids and names: ids and handles never
//! handed out, excess and batched FORGETs, bad and extreme names.

use crate::kernel::Kernel;
use crate::wire::{
    access_in, b, batch_forget_in, create_in, fallocate_in, flush_in, forget_in, fsync_in,
    getattr_in, getxattr_in, link_in, listxattr_in, lseek_in, mkdir_in, mknod_in, op_name, open_in,
    read_in, release_in, rename2_in, rename_in, setxattr_in, statx_in, symlink_in, write_in,
    CopyIn, SetAttrIn, ACCESS, BATCH_FORGET, COPY_FILE_RANGE, CREATE, EBADF, EINVAL, ENOENT,
    ENOSYS, ESTALE, FALLOCATE, FATTR_MODE, FLUSH, FORGET, FSYNC, FSYNCDIR, GETATTR, GETXATTR,
    HEADER, LINK, LISTXATTR, LOOKUP, LSEEK, MKDIR, MKNOD, OPEN, OPENDIR, READ, READDIR,
    READDIRPLUS, READLINK, RELEASE, RELEASEDIR, REMOVEXATTR, RENAME, RENAME2, RMDIR, ROOT, SETATTR,
    SETXATTR, STATX, SYMLINK, TMPFILE, UNLINK, WRITE,
};

/// Node ids never handed out.
pub(crate) const UNKNOWN_IDS: [u64; 5] = [0, 7777, 1 << 40, u64::MAX - 1, u64::MAX];
/// File handles never handed out.
pub(crate) const UNKNOWN_FHS: [u64; 4] = [0, 4242, 1 << 50, u64::MAX];

pub(crate) fn unknown_nodes(k: &mut Kernel) {
    let (f, fh) = k.create(ROOT, b"known");
    let stale = [ESTALE, ENOENT];
    for id in UNKNOWN_IDS {
        k.expect_err(GETATTR, id, &getattr_in(None), &stale);
        k.expect_err(GETATTR, id, &getattr_in(Some(fh)), &stale);
        k.expect_err(STATX, id, &statx_in(None, 0xfff), &stale);
        k.expect_err(STATX, id, &statx_in(Some(fh), 0), &stale);
        k.expect_no_node(LOOKUP, id, &b().name(b"known").done());
        k.expect_no_node(LOOKUP, id, &b().name(b"..").done());
        // "." of an unknown id is how the kernel resolves a file handle
        // (FUSE_EXPORT_SUPPORT): ESTALE for ids that never existed.
        k.expect_err(LOOKUP, id, &b().name(b".").done(), &stale);
        k.expect_err(OPEN, id, &open_in(libc::O_RDONLY), &stale);
        k.expect_err(
            SETATTR,
            id,
            &SetAttrIn {
                valid: FATTR_MODE,
                mode: 0o600,
                ..Default::default()
            }
            .body(),
            &stale,
        );
        k.expect_err(MKDIR, id, &mkdir_in(0o755, b"d"), &stale);
        k.expect_err(MKNOD, id, &mknod_in(libc::S_IFIFO | 0o644, 0, b"p"), &stale);
        k.expect_err(CREATE, id, &create_in(libc::O_RDWR, 0o644, b"c"), &stale);
        k.expect_err(TMPFILE, id, &create_in(libc::O_RDWR, 0o644, b"/"), &stale);
        k.expect_err(SYMLINK, id, &symlink_in(b"s", b"target"), &stale);
        k.expect_err(UNLINK, id, &b().name(b"known").done(), &stale);
        k.expect_err(RMDIR, id, &b().name(b"known").done(), &stale);
        k.expect_err(RENAME, id, &rename_in(ROOT, b"known", b"x"), &stale);
        k.expect_err(RENAME, ROOT, &rename_in(id, b"known", b"x"), &stale);
        k.expect_err(RENAME2, ROOT, &rename2_in(id, 0, b"known", b"x"), &stale);
        k.expect_err(RENAME2, id, &rename2_in(ROOT, 1, b"known", b"x"), &stale);
        k.expect_err(LINK, ROOT, &link_in(id, b"l"), &stale);
        k.expect_err(LINK, id, &link_in(f, b"l"), &stale);
        k.expect_err(READDIR, id, &read_in(0, 0, 4096), &stale);
        k.expect_err(READDIRPLUS, id, &read_in(0, 0, 4096), &stale);
        k.expect_err(FSYNCDIR, id, &fsync_in(0, 0), &stale);
        k.expect_err(READLINK, id, &[], &stale);
        k.expect_err(ACCESS, id, &access_in(libc::R_OK as u32), &stale);
        k.expect_err(GETXATTR, id, &getxattr_in(64, b"user.x"), &stale);
        k.expect_err(LISTXATTR, id, &listxattr_in(64), &stale);
        k.expect_err(SETXATTR, id, &setxattr_in(0, b"user.x", b"v"), &stale);
        k.expect_err(REMOVEXATTR, id, &b().name(b"user.x").done(), &stale);
        // OPENDIR: ENOSYS while the kernel opens directories itself.
        k.expect_err(
            OPENDIR,
            id,
            &open_in(libc::O_RDONLY),
            &[ESTALE, ENOENT, ENOSYS],
        );
    }
    // Unknown handles, on a known node and an unknown one.
    let known_fh = fh;
    for fh in UNKNOWN_FHS {
        for id in [f, 7777] {
            k.expect_err(READ, id, &read_in(fh, 0, 16), &[EBADF]);
            k.expect_err(WRITE, id, &write_in(fh, 0, b"x"), &[EBADF]);
            k.expect_err(FLUSH, id, &flush_in(fh), &[EBADF]);
            k.expect_err(FSYNC, id, &fsync_in(fh, 0), &[EBADF]);
            k.expect_err(FALLOCATE, id, &fallocate_in(fh, 0, 10, 0), &[EBADF]);
            k.expect_err(
                LSEEK,
                id,
                &lseek_in(fh, 0, libc::SEEK_DATA as u32),
                &[EBADF],
            );
            if fh != 0 {
                // Handle 0 is "opened by the kernel" for directories.
                k.expect_err(READDIR, ROOT, &read_in(fh, 0, 4096), &[EBADF]);
                k.expect_err(READDIRPLUS, ROOT, &read_in(fh, 0, 4096), &[EBADF]);
                k.expect_err(FSYNCDIR, ROOT, &fsync_in(fh, 0), &[EBADF]);
            }
            let c = CopyIn {
                fh_in: fh,
                off_in: 0,
                nodeid_out: f,
                fh_out: fh,
                off_out: 0,
                len: 10,
                flags: 0,
            };
            k.expect_err(COPY_FILE_RANGE, id, &c.body(), &[EBADF]);
            let c1 = CopyIn {
                fh_in: known_fh,
                ..c
            };
            k.expect_err(COPY_FILE_RANGE, f, &c1.body(), &[EBADF]);
            let c2 = CopyIn {
                fh_out: known_fh,
                ..c
            };
            k.expect_err(COPY_FILE_RANGE, id, &c2.body(), &[EBADF]);
            k.expect_err(RELEASE, id, &release_in(fh), &[EBADF]);
            k.expect_err(RELEASEDIR, id, &release_in(fh), &[EBADF]);
        }
    }
    // The real handle, released twice.
    let r = k.call(RELEASE, f, &release_in(fh));
    assert!(r.ok());
    k.expect_err(RELEASE, f, &release_in(fh), &[EBADF]);
    k.expect_err(READ, f, &read_in(fh, 0, 1), &[EBADF]);
    let r = k.call(UNLINK, ROOT, &b().name(b"known").done());
    assert!(r.ok(), "unlink: {}", r.errno());
    // Still held by the kernel: GETATTR of the unlinked node works (or,
    // where the file system cannot reach it any more, is ESTALE).
    let r = k.call(GETATTR, f, &getattr_in(None));
    assert!(
        r.ok() || (k.held_may_vanish && r.errno() == ESTALE),
        "getattr of an unlinked but held node: {}",
        r.errno()
    );
    k.no_reply(FORGET, f, &forget_in(1));
    k.expect_err(GETATTR, f, &getattr_in(None), &[ESTALE]);
}

pub(crate) fn forgets(k: &mut Kernel) {
    // Unknown ids, huge counts, zero counts: no reply, nothing changes.
    for id in UNKNOWN_IDS {
        k.no_reply(FORGET, id, &forget_in(1));
        k.no_reply(FORGET, id, &forget_in(u64::MAX));
    }
    k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&[]));
    k.no_reply(
        BATCH_FORGET,
        0,
        &batch_forget_in(&[(7777, 3), (u64::MAX, u64::MAX), (0, 1)]),
    );
    // The root: forgetting it any number of times leaves it usable.
    k.no_reply(FORGET, ROOT, &forget_in(1));
    k.no_reply(FORGET, ROOT, &forget_in(u64::MAX));
    k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&[(ROOT, 5), (ROOT, 1)]));
    k.call(GETATTR, ROOT, &getattr_in(None));
    assert!(k.lookup(ROOT, b".").ok());
    assert!(k.call(GETATTR, ROOT, &getattr_in(None)).ok());
    // A node looked up three times.
    let (f, fh) = k.create(ROOT, b"counted");
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
    assert_eq!(k.lookup(ROOT, b"counted").nodeid(), f);
    assert_eq!(k.lookup(ROOT, b"counted").nodeid(), f);
    assert_eq!(k.counts[&f], 3);
    k.no_reply(
        BATCH_FORGET,
        0,
        &batch_forget_in(&[(f, 1), (7777, 9), (f, 0)]),
    );
    k.check_held();
    k.no_reply(FORGET, f, &forget_in(1));
    k.check_held();
    k.no_reply(FORGET, f, &forget_in(0));
    k.check_held();
    // More than issued: clamped, the node goes.
    k.no_reply(FORGET, f, &forget_in(5));
    k.check_held();
    k.no_reply(FORGET, f, &forget_in(1));
    k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&[(f, u64::MAX)]));
    // Looked up again: the same node, counted from one.
    assert_eq!(k.lookup(ROOT, b"counted").nodeid(), f);
    k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&[(f, 1), (f, 1)]));
    k.check_held();
    // An open file whose node the kernel (wrongly) forgot: its handle
    // still works, and at release nothing is left over.
    let (g, gh) = k.create(ROOT, b"open-forgotten");
    k.no_reply(FORGET, g, &forget_in(1));
    let r = k.call(WRITE, g, &write_in(gh, 0, b"still open"));
    assert!(
        r.ok(),
        "write through a handle of a forgotten node: {}",
        r.errno()
    );
    assert!(k.call(RELEASE, g, &release_in(gh)).ok());
    k.settle();
}

pub(crate) fn names(k: &mut Kernel) {
    let d = k.mkdir(ROOT, b"names").nodeid();
    assert_ne!(d, 0);
    let long = vec![b'n'; 256];
    let max = vec![b'm'; 255];
    let bad: [&[u8]; 4] = [b"", b"a/b", b"/", &long];
    let before = k.list(d);
    for dir in [ROOT, d] {
        for name in bad {
            k.expect_no_node(LOOKUP, dir, &b().name(name).done());
            k.expect_no_node(MKDIR, dir, &mkdir_in(0o755, name));
            k.expect_no_node(MKNOD, dir, &mknod_in(libc::S_IFREG | 0o644, 0, name));
            k.expect_no_node(CREATE, dir, &create_in(libc::O_RDWR, 0o644, name));
            k.expect_no_node(SYMLINK, dir, &symlink_in(name, b"t"));
            k.expect_no_node(UNLINK, dir, &b().name(name).done());
            k.expect_no_node(RMDIR, dir, &b().name(name).done());
            k.expect_no_node(RENAME, dir, &rename_in(dir, name, b"x"));
            k.expect_no_node(RENAME, dir, &rename_in(dir, b"names", name));
            k.expect_no_node(RENAME2, dir, &rename2_in(dir, 0, b"names", name));
        }
        for name in [&b"."[..], b".."] {
            // LOOKUP of "." and ".." answers the directory and its parent.
            let r = k.lookup(dir, name);
            assert!(r.ok() && r.nodeid() != 0, "LOOKUP {name:?}: {}", r.errno());
            k.expect_no_node(MKDIR, dir, &mkdir_in(0o755, name));
            k.expect_no_node(MKNOD, dir, &mknod_in(libc::S_IFREG | 0o644, 0, name));
            k.expect_no_node(
                CREATE,
                dir,
                &create_in(libc::O_RDWR | libc::O_EXCL, 0o644, name),
            );
            k.expect_no_node(SYMLINK, dir, &symlink_in(name, b"t"));
            k.expect_no_node(UNLINK, dir, &b().name(name).done());
            k.expect_no_node(RMDIR, dir, &b().name(name).done());
            k.expect_no_node(RENAME, dir, &rename_in(dir, name, b"x"));
            k.expect_no_node(RENAME2, dir, &rename2_in(dir, 2, name, b"names"));
            k.expect_no_node(LINK, dir, &link_in(dir, name));
        }
    }
    // 255 bytes and non-UTF-8 are fine names.
    for name in [&max[..], b"\xff\xfe\x80", b"sp ace\t\n"] {
        let r = k.mkdir(d, name);
        assert!(r.ok(), "MKDIR {name:?}: {}", r.errno());
        assert_eq!(k.lookup(d, name).nodeid(), r.nodeid());
        assert!(k.call(RMDIR, d, &b().name(name).done()).ok());
    }
    // A name without its NUL (the length field ends before it): fuser
    // cannot parse it and answers ENOSYS; nothing is made.
    for op in [LOOKUP, MKDIR, UNLINK, RMDIR, CREATE, SYMLINK, RENAME] {
        let body = match op {
            MKDIR => b().u32(0o755).u32(0).bytes(b"nonul").done(),
            CREATE => b().u32(2).u32(0o644).u32(0).u32(0).bytes(b"nonul").done(),
            SYMLINK => b().name(b"nonul").bytes(b"target").done(),
            RENAME => b().u64(d).name(b"names").bytes(b"nonul").done(),
            _ => b"nonul".to_vec(),
        };
        k.expect_err(op, d, &body, &[ENOSYS, EINVAL]);
        // The header cuts the name off before its NUL, which follows.
        let mut full = body.clone();
        full.extend_from_slice(b"\0tail\0");
        let r = k.maybe_reply_raw(op, d, (HEADER + body.len()) as u32, &full);
        match r {
            Some(r) if !r.ok() => {}
            other => k.fail(&format!(
                "a cut-off name of {} answered {other:?}",
                op_name(op)
            )),
        }
    }
    // Bytes after the name's NUL are ignored.
    k.expect_no_node(LOOKUP, d, &b().name(b"absent").bytes(b"junk\0").done());
    assert_eq!(k.list(d), before, "bad names changed the directory");
    assert!(k
        .list(ROOT)
        .iter()
        .all(|n| !n.is_empty() && !n.contains(&b'/')));
    // Xattr names and values.
    let (f, fh) = k.create(d, b"x");
    let big = vec![7u8; 70_000];
    let long_attr = [b"user.".as_slice(), &[b'a'; 300]].concat();
    let huge_attr = [b"user.".as_slice(), &[b'a'; 70_000]].concat();
    for (name, value) in [
        (&b""[..], &b"v"[..]),
        (b"user.", b"v"),
        (&long_attr, b"v"),
        (&huge_attr, b""),
        (b"nonamespace", b"v"),
        (b"user.big", &big),
    ] {
        k.expect_no_node(SETXATTR, f, &setxattr_in(0, name, value));
        k.expect_no_node(GETXATTR, f, &getxattr_in(0, name));
        k.expect_no_node(REMOVEXATTR, f, &b().name(name).done());
    }
    // Unknown flags, an empty value, sizes too small.
    let r = k.call(SETXATTR, f, &setxattr_in(0, b"user.empty", b""));
    assert!(r.ok(), "empty xattr value: {}", r.errno());
    k.call(SETXATTR, f, &setxattr_in(0xffff_fff0, b"user.flags", b"v"));
    k.expect_no_node(SETXATTR, f, &setxattr_in(3, b"user.both", b"v"));
    assert!(k
        .call(SETXATTR, f, &setxattr_in(0, b"user.v", b"value"))
        .ok());
    k.expect_err(GETXATTR, f, &getxattr_in(2, b"user.v"), &[libc::ERANGE]);
    k.expect_err(LISTXATTR, f, &listxattr_in(1), &[libc::ERANGE]);
    let r = k.call(GETXATTR, f, &getxattr_in(u32::MAX, b"user.v"));
    assert_eq!(r.body, b"value");
    k.call(LISTXATTR, f, &listxattr_in(0));
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
}
