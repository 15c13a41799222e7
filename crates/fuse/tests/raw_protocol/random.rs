//! The seeded random phase: requests picked from a generator that knows
//! which ids, handles and names are live, with `UVFS_FUZZ_SEED` and
//! `UVFS_FUZZ_OPS` to replay or lengthen a run.

use crate::kernel::Kernel;
use crate::odd::sane;
use crate::wire::{
    access_in, b, batch_forget_in, create_in, fallocate_in, flush_in, forget_in, fsync_in,
    getattr_in, getxattr_in, link_in, listxattr_in, lseek_in, mkdir_in, mknod_in, op_name, open_in,
    read_in, release_in, rename2_in, rename_in, setxattr_in, statx_in, symlink_in, write_in,
    CopyIn, SetAttrIn, ACCESS, BATCH_FORGET, COPY_FILE_RANGE, CREATE, FALLOCATE, FLUSH, FORGET,
    FSYNC, FSYNCDIR, GETATTR, GETLK, GETXATTR, LINK, LISTXATTR, LOOKUP, LSEEK, MKDIR, MKNOD, OPEN,
    OPENDIR, READ, READDIR, READDIRPLUS, READLINK, RELEASE, RELEASEDIR, REMOVEXATTR, RENAME,
    RENAME2, RMDIR, ROOT, SETATTR, SETLK, SETXATTR, STATFS, STATX, SYMLINK, TMPFILE, UNKNOWN_OPS,
    UNLINK, WRITE,
};
use fastrand::Rng;
use uvfs_fuse::MAX_WRITE;

/// What the generator asks of its `fastrand::Rng` beyond fastrand's own
/// methods.
pub(crate) trait Odds {
    /// True `percent` times in 100.
    fn chance(&mut self, percent: u64) -> bool;
    /// One of `xs`, which is not empty.
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T;
}

impl Odds for Rng {
    fn chance(&mut self, percent: u64) -> bool {
        self.u64(..100) < percent
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.usize(..xs.len())]
    }
}

pub(crate) fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        }
        Err(_) => default,
    }
}

pub(crate) struct Gen<'a> {
    pub(crate) rng: Rng,
    pub(crate) k: &'a mut Kernel,
    /// Lengths that make a disk file system allocate or copy stay small.
    pub(crate) bounded: bool,
}

impl Gen<'_> {
    pub(crate) fn node(&mut self) -> u64 {
        let r = self.rng.u64(..100);
        if r < 65 {
            let held: Vec<u64> = (self.k.seen.iter())
                .filter(|id| self.k.counts.contains_key(id))
                .copied()
                .collect();
            self.rng.pick(&held)
        } else if r < 80 {
            let seen = self.k.seen.clone();
            self.rng.pick(&seen)
        } else if r < 90 {
            self.rng.u64(..64)
        } else {
            let any = self.rng.u64(..);
            self.rng.pick(&[0, u64::MAX, 1 << 63, any])
        }
    }

    pub(crate) fn fh(&mut self) -> u64 {
        let r = self.rng.u64(..100);
        if r < 70 && !self.k.open.is_empty() {
            let open: Vec<u64> = self.k.open.iter().copied().collect();
            self.rng.pick(&open)
        } else if r < 85 && !self.k.released.is_empty() {
            let i = self.rng.usize(..self.k.released.len());
            self.k.released[i]
        } else {
            let any = self.rng.u64(..);
            self.rng.pick(&[0, 1, 2, 3, 100, u64::MAX, any])
        }
    }

    pub(crate) fn name(&mut self) -> Vec<u8> {
        const PLAIN: [&[u8]; 8] = [b"a", b"b", b"c", b"d", b"e", b"dir", b"file", b"\xff\xfe"];
        if self.rng.chance(85) {
            return self.rng.pick(&PLAIN).to_vec();
        }
        match self.rng.u64(..7) {
            0 => b".".to_vec(),
            1 => b"..".to_vec(),
            2 => Vec::new(),
            3 => b"x/y".to_vec(),
            4 => vec![b'n'; 255],
            5 => vec![b'n'; 256],
            _ => (0..1 + self.rng.u64(..12))
                .map(|_| 1 + self.rng.u64(..255) as u8)
                .collect(),
        }
    }

    pub(crate) fn offset(&mut self) -> u64 {
        match self.rng.u64(..10) {
            0..=3 => self.rng.u64(..16 << 10),
            4 | 5 => self.rng.u64(..1 << 24),
            6 => self.rng.pick(&[0, 4095, 4096, 8191]),
            7 => self
                .rng
                .pick(&[i64::MAX as u64, i64::MAX as u64 - 1, 1 << 40]),
            8 => self.rng.pick(&[u64::MAX, 1 << 63]),
            _ => self.rng.u64(..),
        }
    }

    /// A READ size whose reply fits through the socket.
    pub(crate) fn size(&mut self) -> u32 {
        let s = match self.rng.u64(..8) {
            0 => 0,
            1..=4 => self.rng.u64(..20000) as u32,
            5 => 4096,
            6 => MAX_WRITE,
            _ => self.rng.pick(&[1, 24, 65536, 2 * MAX_WRITE]),
        };
        s.min(self.k.max_message as u32 - 64)
    }

    pub(crate) fn data(&mut self) -> Vec<u8> {
        let n = match self.rng.u64(..10) {
            0 => 0,
            1..=8 => self.rng.u64(..9000),
            _ => self.rng.u64(..300_000),
        };
        let n = n.min(self.k.max_message as u64 - 128);
        let byte = self.rng.u64(..) as u8;
        vec![byte; n as usize]
    }

    /// A time fuser converts without panicking (it panics on some at the
    /// far ends: see `fuser_survives_malformed_requests`).
    pub(crate) fn time(&mut self) -> (i64, u32) {
        let nsec = if self.rng.chance(80) {
            self.rng.u64(..1_000_000_000) as u32
        } else {
            self.rng.u64(..) as u32
        };
        let sec = match self.rng.u64(..4) {
            0 => self.rng.u64(..1 << 34) as i64,
            1 => -(self.rng.u64(..1 << 34) as i64),
            2 => 0,
            _ => {
                return (
                    self.rng.pick(&[i64::MAX, i64::MIN + 1, -1]),
                    nsec % 1_000_000_000,
                )
            }
        };
        (sec, nsec)
    }

    pub(crate) fn mode(&mut self) -> u32 {
        let kind = self.rng.pick(&[
            libc::S_IFREG,
            libc::S_IFREG,
            libc::S_IFIFO,
            libc::S_IFSOCK,
            libc::S_IFCHR,
            libc::S_IFDIR,
            0,
            0o170000,
        ]);
        kind | (self.rng.u64(..0o10000) as u32)
    }

    pub(crate) fn step(&mut self) {
        match self.rng.u64(..40) {
            0..=4 => {
                let (dir, name) = (self.node(), self.name());
                self.k.call(LOOKUP, dir, &b().name(&name).done());
            }
            5 | 6 => {
                let (id, fh) = (self.node(), self.fh());
                let fh = self.rng.chance(20).then_some(fh);
                if self.rng.chance(25) {
                    self.k.call(STATX, id, &statx_in(fh, self.rng.u32(..)));
                } else {
                    self.k.call(GETATTR, id, &getattr_in(fh));
                }
            }
            7 | 8 => {
                let id = self.node();
                let mut set = SetAttrIn {
                    valid: self.rng.u64(..) as u32 & 0x7ff,
                    fh: self.fh(),
                    size: if self.rng.chance(70) {
                        self.rng.u64(..1 << 20)
                    } else {
                        self.offset()
                    },
                    atime: self.time(),
                    mtime: self.time(),
                    ctime: self.time(),
                    mode: self.mode(),
                    uid: self.k.uid,
                    gid: self.k.gid,
                };
                if self.rng.chance(10) {
                    set.uid = self.rng.u64(..) as u32;
                }
                self.k.call(SETATTR, id, &set.body());
            }
            9 | 10 => {
                let (dir, name) = (self.node(), self.name());
                self.k
                    .call(MKDIR, dir, &mkdir_in(self.rng.u64(..0o10000) as u32, &name));
            }
            11 => {
                let (dir, name, mode) = (self.node(), self.name(), self.mode());
                self.k
                    .call(MKNOD, dir, &mknod_in(mode, self.rng.u64(..) as u32, &name));
            }
            12..=14 => {
                let (dir, name) = (self.node(), self.name());
                let flags = libc::O_RDWR
                    | if self.rng.chance(30) { libc::O_EXCL } else { 0 }
                    | if self.rng.chance(20) {
                        libc::O_TRUNC
                    } else {
                        0
                    };
                let mode = self.mode();
                // Now and then an unnamed file instead (O_TMPFILE; the
                // name is ignored, as the kernel's "/" is).
                let op = if self.rng.chance(15) { TMPFILE } else { CREATE };
                self.k.call(op, dir, &create_in(flags, mode, &name));
            }
            15 => {
                let (dir, name, target) = (self.node(), self.name(), self.name());
                self.k.call(SYMLINK, dir, &symlink_in(&name, &target));
            }
            16 | 17 => {
                let (dir, name) = (self.node(), self.name());
                let op = if self.rng.chance(50) { UNLINK } else { RMDIR };
                self.k.call(op, dir, &b().name(&name).done());
            }
            18 | 19 => {
                let (a, b2) = (self.node(), self.node());
                let (n1, n2) = (self.name(), self.name());
                if self.rng.chance(50) {
                    self.k.call(RENAME, a, &rename_in(b2, &n1, &n2));
                } else {
                    let flags = self.rng.pick(&[0, 1, 2, 4, 3, u32::MAX]);
                    self.k.call(RENAME2, a, &rename2_in(b2, flags, &n1, &n2));
                }
            }
            20 => {
                let (id, dir, name) = (self.node(), self.node(), self.name());
                self.k.call(LINK, dir, &link_in(id, &name));
            }
            21 | 22 => {
                let id = self.node();
                let flags = self.rng.pick(&[
                    libc::O_RDONLY,
                    libc::O_WRONLY,
                    libc::O_RDWR,
                    libc::O_RDWR | libc::O_TRUNC,
                    -1,
                ]);
                let op = if self.rng.chance(80) { OPEN } else { OPENDIR };
                self.k.call(op, id, &open_in(flags));
            }
            23 | 24 => {
                let (id, fh, off, size) = (self.node(), self.fh(), self.offset(), self.size());
                self.k.call(READ, id, &read_in(fh, off, size));
            }
            25 | 26 => {
                let (id, fh, off, data) = (self.node(), self.fh(), self.offset(), self.data());
                self.k.call(WRITE, id, &write_in(fh, off, &data));
            }
            27 => {
                let (id, fh) = (self.node(), self.fh());
                let op = self
                    .rng
                    .pick(&[RELEASE, RELEASEDIR, FLUSH, FSYNC, FSYNCDIR, GETLK, SETLK]);
                let body = match op {
                    RELEASE | RELEASEDIR => release_in(fh),
                    FLUSH => flush_in(fh),
                    // Never SETLKW: a conflicting one waits (by design)
                    // and the storm wants every request answered.
                    GETLK | SETLK => {
                        let typ = self
                            .rng
                            .pick(&[libc::F_RDLCK, libc::F_WRLCK, libc::F_UNLCK, 7]);
                        let start = self.offset();
                        let end = if self.rng.chance(50) {
                            u64::MAX
                        } else {
                            self.offset()
                        };
                        b().u64(fh)
                            .u64(self.rng.u64(..4)) // lock owner
                            .u64(start)
                            .u64(end)
                            .u32(typ as u32)
                            .u32(1)
                            .u32(self.rng.u64(..2) as u32) // FUSE_LK_FLOCK
                            .u32(0)
                            .done()
                    }
                    _ => fsync_in(fh, self.rng.u64(..2) as u32),
                };
                self.k.call(op, id, &body);
            }
            28 | 29 => {
                let (id, off, size) = (self.node(), self.offset(), self.size());
                let fh = if self.rng.chance(70) { 0 } else { self.fh() };
                let off = if self.rng.chance(60) {
                    self.rng.u64(..40)
                } else {
                    off
                };
                let op = if self.rng.chance(50) {
                    READDIR
                } else {
                    READDIRPLUS
                };
                self.k.call(op, id, &read_in(fh, off, size.min(1 << 17)));
            }
            30 | 31 => {
                let id = self.node();
                let n = self.rng.pick(&[0, 1, 1, 1, 2, 100, u64::MAX]);
                self.k.no_reply(FORGET, id, &forget_in(n));
            }
            32 => {
                let list: Vec<(u64, u64)> = (0..self.rng.u64(..6))
                    .map(|_| (self.node(), self.rng.pick(&[0, 1, 1, 3, u64::MAX])))
                    .collect();
                self.k.no_reply(BATCH_FORGET, 0, &batch_forget_in(&list));
            }
            33 => {
                let id = self.node();
                let name = if self.rng.chance(80) {
                    self.rng
                        .pick(&[&b"user.a"[..], b"user.b", b"trusted.t", b"security.s"])
                        .to_vec()
                } else {
                    self.name()
                };
                match self.rng.u64(..4) {
                    0 => {
                        let v = self.data();
                        let v = &v[..v.len().min(70_000)];
                        let flags = self.rng.pick(&[0, 1, 2, 3, u32::MAX]);
                        self.k.call(SETXATTR, id, &setxattr_in(flags, &name, v));
                    }
                    1 => {
                        let size = self.rng.pick(&[0, 1, 10, 65536, u32::MAX]);
                        self.k.call(GETXATTR, id, &getxattr_in(size, &name));
                    }
                    2 => {
                        let size = self.rng.pick(&[0, 1, 10, 65536, u32::MAX]);
                        self.k.call(LISTXATTR, id, &listxattr_in(size));
                    }
                    _ => {
                        self.k.call(REMOVEXATTR, id, &b().name(&name).done());
                    }
                }
            }
            34 => {
                let (id, fh, off) = (self.node(), self.fh(), self.offset());
                let mut len = if self.rng.chance(60) {
                    self.rng.u64(..1 << 16)
                } else {
                    self.offset()
                };
                // On a disk file system a large allocation fills the disk
                // (ext4 keeps what it allocated before ENOSPC).
                if self.bounded && len > 1 << 20 {
                    len = self.rng.u64(..1 << 20);
                }
                let mode = self.rng.pick(&[0, 0, 1, 2, 3, 0x10, 0x11, u32::MAX]);
                self.k
                    .call(FALLOCATE, id, &fallocate_in(fh, off, len, mode));
            }
            35 => {
                let (id, fh) = (self.node(), self.fh());
                let off = if self.rng.chance(70) {
                    self.rng.u64(..1 << 16) as i64
                } else {
                    self.rng.u64(..) as i64
                };
                let whence = self.rng.pick(&[3, 4, 3, 4, 0, 1, 2, 5, u32::MAX]);
                self.k.call(LSEEK, id, &lseek_in(fh, off, whence));
            }
            36 => {
                let id = self.node();
                let c = CopyIn {
                    fh_in: self.fh(),
                    off_in: self.offset(),
                    nodeid_out: self.node(),
                    fh_out: self.fh(),
                    off_out: self.offset(),
                    len: if self.rng.chance(60) {
                        self.rng.u64(..1 << 16)
                    } else {
                        self.offset()
                    },
                    flags: if self.rng.chance(90) {
                        0
                    } else {
                        self.rng.u64(..)
                    },
                };
                let c = if self.bounded {
                    CopyIn {
                        len: c.len.min(1 << 20),
                        ..c
                    }
                } else {
                    c
                };
                self.k.call(COPY_FILE_RANGE, id, &c.body());
            }
            37 => {
                let id = self.node();
                match self.rng.u64(..4) {
                    0 => {
                        self.k.call(READLINK, id, &[]);
                    }
                    1 => {
                        self.k
                            .call(ACCESS, id, &access_in(self.rng.u64(..8) as u32));
                    }
                    2 => {
                        self.k.call(STATFS, id, &[]);
                    }
                    _ => {
                        let op = self.rng.pick(&UNKNOWN_OPS);
                        self.k.call(op, id, &[0; 32]);
                    }
                }
            }
            _ => {
                // A known request cut short.
                let id = self.node();
                // (opcode, size of its fixed struct)
                let (op, min) = self.rng.pick(&[
                    (GETATTR, 16),
                    (STATX, 24),
                    (SETATTR, 88),
                    (OPEN, 8),
                    (READ, 40),
                    (WRITE, 40),
                    (RELEASE, 24),
                    (MKDIR, 8),
                    (CREATE, 16),
                    (TMPFILE, 16),
                    (RENAME2, 16),
                    (LINK, 8),
                    (FALLOCATE, 32),
                    (LSEEK, 24),
                    (COPY_FILE_RANGE, 56),
                    (FORGET, 8),
                    (BATCH_FORGET, 8),
                ]);
                let len = self.rng.u64(..min) as usize;
                let body: Vec<u8> = (0..len).map(|_| self.rng.u64(..) as u8).collect();
                let r = self.k.maybe_reply(op, id, &body);
                if let Some(r) = r {
                    if r.ok() {
                        self.k
                            .fail(&format!("{} with a {len}-byte body succeeded", op_name(op)));
                    }
                }
            }
        }
    }
}

pub(crate) fn random_phase(k: &mut Kernel, seed: u64, ops: u64, bounded: bool) {
    let mut g = Gen {
        rng: Rng::with_seed(seed),
        k,
        bounded,
    };
    // A few names to start from.
    for name in [&b"a"[..], b"dir"] {
        g.k.mkdir(ROOT, name);
    }
    g.k.create(ROOT, b"file");
    for i in 0..ops {
        g.k.tag = format!("UVFS_FUZZ_SEED={seed:#x} step {i}/{ops}: ");
        g.step();
        if i % 500 == 499 {
            g.k.check_held();
        }
    }
    g.k.tag = format!("UVFS_FUZZ_SEED={seed:#x} after {ops} steps: ");
    let rep = g.k.mount().report(false);
    let c = |n: &str| rep["counters"][n].as_u64().unwrap_or(0);
    eprintln!(
        "{} requests answered, {} with an errno; {} nodes held",
        c("fuse.requests"),
        c("fuse.requests.errors"),
        c("fuse.nodes")
    );
    if std::env::var_os("UVFS_FUZZ_VERBOSE").is_some() {
        eprintln!("{}", uvfs_fuse::format_stats(&rep));
    }
    g.k.settle();
    sane(g.k, b"sane-after-random");
}
