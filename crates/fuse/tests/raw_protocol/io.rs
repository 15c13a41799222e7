//! Targeted cases about open files: reads, writes, truncation, syncs,
//! fallocate, lseek and copy_file_range at extreme offsets and sizes, on
//! handles real, released and never handed out.

use crate::kernel::Kernel;
use crate::wire::{
    access_in, b, fallocate_in, flush_in, fsync_in, getattr_in, link_in, lseek_in, mknod_in,
    open_in, read_in, release_in, rename2_in, rename_in, symlink_in, u32_at, u64_at, write_in,
    CopyIn, SetAttrIn, ACCESS, COPY_FILE_RANGE, EINVAL, FALLOCATE, FATTR_ATIME, FATTR_ATIME_NOW,
    FATTR_CTIME, FATTR_FH, FATTR_GID, FATTR_MODE, FATTR_MTIME, FATTR_MTIME_NOW, FATTR_SIZE,
    FATTR_UID, FLUSH, FSYNC, FSYNCDIR, GETATTR, LINK, LSEEK, MKNOD, OPEN, READ, READDIR,
    READDIRPLUS, READLINK, RELEASE, RENAME, RENAME2, RMDIR, ROOT, SETATTR, SYMLINK, UNLINK, WRITE,
};
use uvfs_fuse::MAX_WRITE;

pub(crate) fn io(k: &mut Kernel, memfs: bool) {
    let d = k.mkdir(ROOT, b"io").nodeid();
    let (f, fh) = k.create(d, b"f");
    assert!(k.call(WRITE, f, &write_in(fh, 0, b"hello")).ok());
    // Offsets past off_t: fuser refuses them (EINVAL).
    for off in [u64::MAX, 1 << 63] {
        k.expect_err(READ, f, &read_in(fh, off, 16), &[EINVAL]);
        k.expect_err(WRITE, f, &write_in(fh, off, b"x"), &[EINVAL]);
        k.expect_err(FALLOCATE, f, &fallocate_in(fh, off, 1, 0), &[EINVAL]);
        k.expect_err(FALLOCATE, f, &fallocate_in(fh, 0, off, 0), &[EINVAL]);
    }
    // The largest offsets a file can have.
    let r = k.call(READ, f, &read_in(fh, i64::MAX as u64, 16));
    assert!(!r.ok() || r.body.is_empty(), "read at i64::MAX: {r:?}");
    k.expect_no_node(WRITE, f, &write_in(fh, i64::MAX as u64, b"xy"));
    k.expect_no_node(WRITE, f, &write_in(fh, i64::MAX as u64 - 1, b"xy"));
    k.call(WRITE, f, &write_in(fh, i64::MAX as u64 - 1, b"z"));
    // Zero sizes.
    let r = k.call(READ, f, &read_in(fh, 0, 0));
    assert!(r.ok() && r.body.is_empty());
    let r = k.call(WRITE, f, &write_in(fh, 3, b""));
    assert!(r.ok() && u32_at(&r.body, 0) == 0, "empty write: {r:?}");
    // Sizes past max_write. The file is i64::MAX bytes now (all hole but
    // its last page) if the write above succeeded, and 4 GiB of it does
    // not fit a reply: encoding its length must not panic the request
    // loop. The server answers in part, but what is left (16 MiB) exceeds
    // what a socket datagram carries, so the reply may be lost on the
    // way; the server must live on.
    if let Some(r) = k.maybe_reply(READ, f, &read_in(fh, 0, u32::MAX)) {
        assert!(r.ok(), "read of u32::MAX bytes: {}", r.errno());
    }
    if k.max_message > 2 * MAX_WRITE as usize + 64 {
        let r = k.call(READ, f, &read_in(fh, 0, 2 * MAX_WRITE));
        assert!(r.ok(), "read of 2 MiB: {}", r.errno());
    }
    if memfs && k.max_message > 2 * MAX_WRITE as usize + 64 {
        let data = vec![0xa5u8; 2 * MAX_WRITE as usize];
        let r = k.call(WRITE, f, &write_in(fh, 4096, &data));
        if r.ok() {
            assert_eq!(u32_at(&r.body, 0), 2 * MAX_WRITE);
        }
    }
    // SETATTR extremes.
    let sz = |size| SetAttrIn {
        valid: FATTR_SIZE,
        size,
        ..Default::default()
    };
    k.expect_no_node(SETATTR, f, &sz(u64::MAX).body());
    k.expect_no_node(SETATTR, f, &sz(1 << 63).body());
    k.call(SETATTR, f, &sz(i64::MAX as u64).body());
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: FATTR_SIZE | FATTR_FH,
            fh: u64::MAX,
            size: 3,
            ..Default::default()
        }
        .body(),
    );
    assert!(k.call(SETATTR, f, &sz(5).body()).ok());
    assert_eq!(k.size_of(f), 5);
    // COPY_FILE_RANGE extremes, into a second file and within the first.
    let (g, gh) = k.create(d, b"g");
    let cp = |fh_out: u64, off_in: u64, off_out: u64, len: u64, flags: u64| {
        CopyIn {
            fh_in: fh,
            off_in,
            nodeid_out: if fh_out == fh { f } else { g },
            fh_out,
            off_out,
            len,
            flags,
        }
        .body()
    };
    let big = i64::MAX as u64;
    for (off_in, off_out, len, flags) in [
        (u64::MAX, 0, 1, 0),
        (1 << 63, 0, 1, 0),
        (0, u64::MAX, 1, 0),
        (0, big, 1, 0),
        (0, big - 1, u64::MAX, 0),
        (0, 0, u64::MAX, 0),
        (0, 0, 5, u64::MAX),
        (big, 0, u64::MAX, 0),
    ] {
        k.call(COPY_FILE_RANGE, f, &cp(gh, off_in, off_out, len, flags));
    }
    k.call(COPY_FILE_RANGE, f, &cp(fh, 0, 2, 5, 0));
    // The server lives on, and a plain copy copies.
    assert!(k.call(SETATTR, g, &sz(0).body()).ok());
    let r = k.call(COPY_FILE_RANGE, f, &cp(gh, 1, 0, 1 << 40, 0));
    assert!(r.ok(), "copy: {}", r.errno());
    assert_eq!(u32_at(&r.body, 0), 4);
    assert_eq!(k.size_of(g), 4);
    if memfs {
        // Overlapping ranges of one file: refused, as the kernel would.
        k.expect_err(COPY_FILE_RANGE, f, &cp(fh, 0, 2, 5, 0), &[EINVAL]);
        k.expect_err(COPY_FILE_RANGE, f, &cp(gh, 0, 0, 5, 1), &[EINVAL]);
        k.expect_err(COPY_FILE_RANGE, f, &cp(gh, 0, big, 5, 0), &[libc::EFBIG]);
    }
    assert_eq!(k.size_of(f), 5);
    // A mode with file-type bits (a directory's, a socket's): the type
    // of the node must not change.
    for mode in [libc::S_IFDIR | 0o755, libc::S_IFSOCK | 0o777, 0xffff_ffff] {
        k.call(
            SETATTR,
            f,
            &SetAttrIn {
                valid: FATTR_MODE,
                mode,
                ..Default::default()
            }
            .body(),
        );
        let r = k.call(GETATTR, f, &getattr_in(None));
        assert_eq!(
            u32_at(&r.body, 16 + 60) & libc::S_IFMT,
            libc::S_IFREG,
            "mode {mode:#o} changed the type"
        );
    }
    // Times: nanoseconds of a second or more, before 1970, far ends.
    for (sec, nsec) in [
        (0, 1_000_000_000),
        (1, u32::MAX),
        (-1, 999_999_999),
        (-5, 1_500_000_000),
        (i64::MAX, 0),
        (i64::MAX, 999_999_999),
        (i64::MIN + 1, 999_999_999),
        (1 << 40, u32::MAX),
    ] {
        let set = SetAttrIn {
            valid: FATTR_ATIME | FATTR_MTIME | FATTR_CTIME,
            atime: (sec, nsec),
            mtime: (sec, nsec),
            ctime: (sec, nsec),
            ..Default::default()
        };
        k.call(SETATTR, f, &set.body());
    }
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: FATTR_ATIME_NOW | FATTR_MTIME_NOW | FATTR_ATIME | FATTR_MTIME,
            ..Default::default()
        }
        .body(),
    );
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: !FATTR_SIZE,
            mode: 0o644,
            uid: k.uid,
            gid: k.gid,
            ..Default::default()
        }
        .body(),
    );
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: FATTR_UID | FATTR_GID,
            uid: u32::MAX,
            gid: u32::MAX,
            ..Default::default()
        }
        .body(),
    );
    k.call(
        SETATTR,
        f,
        &SetAttrIn {
            valid: FATTR_UID | FATTR_GID,
            uid: k.uid,
            gid: k.gid,
            ..Default::default()
        }
        .body(),
    );
    k.call(SETATTR, d, &sz(0).body());
    // LSEEK: bad whence, negative and huge offsets.
    for whence in [0u32, 1, 2, 3, 4, 5, u32::MAX] {
        for off in [0i64, 2, -1, i64::MIN, i64::MAX] {
            k.call(LSEEK, f, &lseek_in(fh, off, whence));
        }
    }
    // FALLOCATE: zero length, offset + len past the largest file, every
    // mode bit.
    k.expect_no_node(FALLOCATE, f, &fallocate_in(fh, 0, 0, 0));
    k.expect_no_node(
        FALLOCATE,
        f,
        &fallocate_in(fh, i64::MAX as u64, i64::MAX as u64, 0),
    );
    k.expect_no_node(FALLOCATE, f, &fallocate_in(fh, i64::MAX as u64 - 1, 2, 0));
    if memfs {
        // (A disk file system might allocate much of it before failing.)
        k.expect_no_node(FALLOCATE, f, &fallocate_in(fh, 0, 1 << 40, 0));
    }
    for mode in [1u32, 2, 3, 0x10, 0x20, 0x40, u32::MAX] {
        k.call(FALLOCATE, f, &fallocate_in(fh, 0, 4096, mode));
    }
    assert!(k.call(FALLOCATE, f, &fallocate_in(fh, 0, 8192, 0)).ok());
    // COPY_FILE_RANGE: overlapping within one file, huge lengths, flags.
    let (g, gh) = k.create(d, b"g");
    let copies = [
        (fh, 0, f, fh, 2, 10, 0),
        (fh, 0, f, fh, 0, 10, 0),
        (fh, 2, f, fh, 0, u64::MAX, 0),
        (fh, 0, g, gh, 0, u64::MAX, 0),
        (fh, 0, g, gh, i64::MAX as u64, 10, 0),
        (fh, i64::MAX as u64, g, gh, 0, 10, 0),
        (fh, u64::MAX, g, gh, 0, 10, 0),
        (fh, 0, g, gh, u64::MAX, 10, 0),
        (fh, 0, g, gh, 0, 10, 1),
        (fh, 0, g, gh, 0, 10, u64::MAX),
        (fh, 0, 7777, gh, 0, 10, 0),
        (gh, 0, g, gh, 1, 100, 0),
    ];
    for (fh_in, off_in, nodeid_out, fh_out, off_out, len, flags) in copies {
        let c = CopyIn {
            fh_in,
            off_in,
            nodeid_out,
            fh_out,
            off_out,
            len,
            flags,
        };
        k.call(COPY_FILE_RANGE, f, &c.body());
    }
    // Directory handles and file handles mixed up, I/O on a directory.
    k.call(READDIR, f, &read_in(fh, 0, 4096));
    k.call(READDIRPLUS, f, &read_in(fh, 0, 4096));
    k.expect_no_node(READDIR, f, &read_in(0, 0, 4096));
    k.expect_no_node(OPEN, d, &open_in(libc::O_RDWR));
    k.call(OPEN, d, &open_in(libc::O_RDONLY));
    k.call(OPEN, f, &open_in(-1));
    // READDIR offsets: garbage cookies, and sizes too small for one entry.
    for off in [0u64, 1, 2, 3, 1000, i64::MAX as u64, u64::MAX] {
        for size in [0u32, 1, 24, 4096, u32::MAX] {
            k.call(READDIR, d, &read_in(0, off, size));
            k.call(READDIRPLUS, d, &read_in(0, off, size));
        }
    }
    // Flush, fsync with garbage flags.
    k.call(FLUSH, f, &flush_in(fh));
    k.call(FSYNC, f, &fsync_in(fh, u32::MAX));
    k.call(FSYNCDIR, d, &fsync_in(0, u32::MAX));
    // RENAME2 flags: unknown bits, NOREPLACE | EXCHANGE together.
    for flags in [8u32, 3, 1 << 31, u32::MAX] {
        k.expect_no_node(RENAME2, d, &rename2_in(d, flags, b"f", b"h"));
    }
    // RENAME_WHITEOUT is the file system's to take or refuse.
    if k.call(RENAME2, d, &rename2_in(d, 4, b"f", b"h")).ok() {
        let r = k.call(RENAME2, d, &rename2_in(d, 0, b"h", b"f"));
        assert!(r.ok(), "renaming back after a whiteout: {}", r.errno());
    }
    let r = k.call(RENAME2, d, &rename2_in(d, 2, b"f", b"g"));
    assert!(r.ok(), "RENAME_EXCHANGE: {}", r.errno());
    assert!(k.call(RENAME2, d, &rename2_in(d, 2, b"f", b"g")).ok());
    k.expect_no_node(RENAME2, d, &rename2_in(d, 1, b"f", b"g"));
    // A directory into itself, into its child, over a non-empty one.
    let sub = k.mkdir(d, b"sub").nodeid();
    k.expect_no_node(RENAME, ROOT, &rename_in(sub, b"io", b"loop"));
    k.expect_no_node(RENAME, ROOT, &rename_in(d, b"io", b"loop"));
    k.expect_no_node(RENAME2, ROOT, &rename2_in(sub, 2, b"io", b"sub"));
    k.expect_no_node(RENAME, d, &rename_in(ROOT, b"sub", b"io"));
    k.expect_no_node(RMDIR, ROOT, &b().name(b"io").done());
    // LINK of a directory, onto an existing name.
    k.expect_no_node(LINK, ROOT, &link_in(d, b"dirlink"));
    k.expect_no_node(LINK, d, &link_in(f, b"g"));
    assert!(k.call(LINK, ROOT, &link_in(f, b"hard")).ok());
    assert!(k.call(UNLINK, ROOT, &b().name(b"hard").done()).ok());
    // Special files and odd modes. The kernel opens FIFOs, sockets and
    // devices itself, never through the server: an OPEN of one is
    // refused (a passthrough server blocked in open(2) of a FIFO).
    for mode in [
        libc::S_IFIFO | 0o644,
        libc::S_IFCHR | 0o644,
        libc::S_IFBLK | 0o644,
        libc::S_IFSOCK | 0o644,
        libc::S_IFREG | 0o644,
        0o644,
        libc::S_IFDIR | 0o755,
        libc::S_IFLNK | 0o777,
        0o170000 | 0o644,
        0xffff_ffff,
    ] {
        let r = k.call(MKNOD, d, &mknod_in(mode, u32::MAX, b"node"));
        if !r.ok() {
            continue;
        }
        let node = r.nodeid();
        let special = [libc::S_IFIFO, libc::S_IFCHR, libc::S_IFBLK, libc::S_IFSOCK]
            .contains(&(mode & libc::S_IFMT));
        for flags in [libc::O_RDONLY, libc::O_RDWR] {
            let r = if special {
                k.expect_no_node(OPEN, node, &open_in(flags))
            } else {
                k.call(OPEN, node, &open_in(flags))
            };
            if r.ok() {
                let h = u64_at(&r.body, 0);
                k.call(READ, ROOT, &read_in(h, 0, 10));
                k.call(WRITE, ROOT, &write_in(h, 0, b"x"));
                k.call(LSEEK, ROOT, &lseek_in(h, 0, libc::SEEK_HOLE as u32));
                k.call(RELEASE, ROOT, &release_in(h));
            }
        }
        assert!(k.call(UNLINK, d, &b().name(b"node").done()).ok());
    }
    // Symlink targets.
    let long_target = vec![b't'; 5000];
    for target in [&b""[..], &long_target, b"a\xffb", b"/abs/olute"] {
        let r = k.call(SYMLINK, d, &symlink_in(b"sl", target));
        if r.ok() {
            let r2 = k.call(READLINK, r.nodeid(), &[]);
            assert_eq!(r2.body, target);
            k.expect_no_node(OPEN, r.nodeid(), &open_in(libc::O_RDONLY));
            assert!(k.call(UNLINK, d, &b().name(b"sl").done()).ok());
        }
    }
    // ACCESS with every bit.
    k.call(ACCESS, f, &access_in(u32::MAX));
    assert!(k.call(RELEASE, f, &release_in(fh)).ok());
    assert!(k.call(RELEASE, g, &release_in(gh)).ok());
}
