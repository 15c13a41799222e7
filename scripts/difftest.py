#!/usr/bin/env python3
"""Differential random-operation test of POSIX file-system semantics.

Runs one random sequence of file-system operations in two directories, a
uvfs mount (TARGET_DIR) and a reference directory on a kernel file system
(REFERENCE_DIR: tmpfs for memfs, ext4 for passthrough of an ext4 source),
and compares every outcome (return value or errno name), plus a full-tree
comparison every --check-every ops and at the end.

Usage: difftest.py TARGET_DIR REFERENCE_DIR [--seed N] [--ops N] [--verbose]
                   [--seeds K] [--check-every N] [--minimize] [--dump FILE]
                   [--replay FILE] [--blocks] [--chardev] [--tmpfile] [--drop-caches N]
                   [--avoid BUG]...

Both directories must be empty; everything happens inside a work directory
`w` created in each (removed at the end unless --keep). Single process,
deterministic from the seed: the generator biases its choices toward names
that exist in the reference tree and fds that are open there, and the
reference's behaviour is itself deterministic, so `--seed N --ops K`
replays a run exactly. --dump writes the operations (JSON), --replay runs
such a list, --minimize cuts the operations up to the first divergence
down by delta debugging (every try from emptied trees) and prints the
short sequence. --seeds K runs seeds N..N+K-1 and stops at the first
divergence. --avoid steers clear of a known bug (see AVOIDABLE) to look
for others; --drop-caches N makes the kernel forget dentries/inodes every
N ops (FUSE FORGETs; system-wide, root only).

Typical use (memfs against tmpfs; passthrough against ext4):
    uvfs mount /tmp/m; R=$(mktemp -d /dev/shm/ref.XXXX)
    scripts/difftest.py /tmp/m $R --seed 1 --seeds 200 --ops 2000 --minimize

Exit 0 if the trees never diverged, 1 with a report of the first divergence
(seed, op index, the operation, both results, the last operations), 2 on a
usage error.

Not compared, on purpose (legitimate differences between a FUSE file
system and tmpfs/ext4, not bugs):
  * st_ino, st_dev, st_blksize (FUSE reports the server's or the kernel's
    choice, tmpfs PAGE_SIZE, ext4 the fs block), atime, ctime: identity and
    clock values differ by construction; ctime/atime updates use the
    kernel's coarse clock on tmpfs and cannot be set explicitly.
  * mtime, except right after it was set explicitly (utimensat with
    explicit nanoseconds; the `utime` op compares the result at once) and
    in `probe` ops, which set a sentinel mtime on every path involved (and
    its parent), run an operation, and compare *whether* each mtime moved.
  * st_size of directories: tmpfs reports 20 * (entries + 2)... ext4 a
    multiple of the block size, FUSE whatever the server says; no standard.
  * st_blocks (unless --blocks): allocation granularity and preallocation
    differ (ext4 allocates 4 KiB blocks and extents, tmpfs pages).
  * SEEK_DATA/SEEK_HOLE positions: POSIX lets a file system report the
    whole file as data; uvfs's FUSE server has no LSEEK, so the kernel's
    generic fallback does exactly that, while tmpfs/ext4 report real holes.
    Only the errno (ENXIO past EOF), and that the result lies in
    [offset, size], are compared; both fds are then put back at `offset`.
  * Only user.* xattrs and POSIX ACLs (system.posix_acl_access/default,
    set and removed by the `acl` op, random valid and invalid ACLs) are
    used: trusted.*/security.* depend on the file system's handlers and
    the mount, not on uvfs's semantics.
  * The mount root itself is never operated on (its mode, owner and the
    EBUSY of rmdir on a mount point differ from a plain directory).
  * lseek on directories (offsets are opaque cookies; tmpfs rejects
    SEEK_END/DATA/HOLE there, FUSE uses the generic llseek).
  * FIFO mtimes after pipe I/O (pipe_write updates only the kernel's
    inode; a FUSE getattr asks the server, which never saw the I/O).
  * A symlink's atime after utimensat (resolving a path through the same
    symlink touches it under relatime on tmpfs/ext4, not on FUSE).
  * Whether a RENAME_WHITEOUT that fails moves the parent's mtime (ext4
    does, having made the whiteout first; tmpfs does not).
  * Whether truncate(2) to the *current* size moves mtime (POSIX requires
    it only if the size changed; tmpfs does not, ext4 and memfs do).
Directory st_nlink (2 + subdirectories) *is* compared.
"""
import argparse
import ctypes
import ctypes.util
import errno
import json
import os
import random
import shutil
import stat
import sys
import time

# ---------------------------------------------------------------- libc bits

LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
RENAME_WHITEOUT = 4
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
SEEK_DATA = getattr(os, "SEEK_DATA", 3)
SEEK_HOLE = getattr(os, "SEEK_HOLE", 4)

_renameat2 = getattr(LIBC, "renameat2", None)
if _renameat2 is not None:
    _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                           ctypes.c_uint]
    _renameat2.restype = ctypes.c_int
AT_EMPTY_PATH = 0x1000
_linkat = LIBC.linkat
_linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
_linkat.restype = ctypes.c_int
_fallocate = getattr(LIBC, "fallocate64", None) or getattr(LIBC, "fallocate", None)
if _fallocate is not None:
    _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    _fallocate.restype = ctypes.c_int


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_utimensat = LIBC.utimensat
_utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(Timespec), ctypes.c_int]
_utimensat.restype = ctypes.c_int
_futimens = LIBC.futimens
_futimens.argtypes = [ctypes.c_int, ctypes.POINTER(Timespec)]
_futimens.restype = ctypes.c_int


def _check(rc):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return rc


def renameat2(src, dst, flags):
    if _renameat2 is None:
        raise OSError(errno.ENOSYS, "no renameat2")
    return _check(_renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), flags))


def fallocate(fd, mode, off, length):
    if _fallocate is None:
        raise OSError(errno.ENOSYS, "no fallocate")
    return _check(_fallocate(fd, mode, off, length))


def _times(at, mt):
    arr = (Timespec * 2)()
    for i, t in enumerate((at, mt)):
        if t is None:
            arr[i].tv_sec, arr[i].tv_nsec = 0, UTIME_OMIT
        else:
            arr[i].tv_sec, arr[i].tv_nsec = t // 10**9, t % 10**9
    return arr


def utimens(path, at, mt, follow):
    """utimensat with explicit ns (None = UTIME_OMIT)."""
    flags = 0 if follow else AT_SYMLINK_NOFOLLOW
    return _check(_utimensat(AT_FDCWD, os.fsencode(path), _times(at, mt), flags))


def futimens(fd, at, mt):
    return _check(_futimens(fd, _times(at, mt)))


# ---------------------------------------------------------------- namespace

NAMES = ["a", "b", "c", "d"]
SLOTS = 4
# <linux/posix_acl_xattr.h> tags.
ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_GROUP, ACL_MASK, ACL_OTHER = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20)
XNAMES = ["user.x", "user.y", "user.zz"]
DATA = random.Random(0xD1FF).randbytes(1 << 17)
SENTINEL_NS = 123_456_789_000_000_007  # 1973-11-29, never set by TIMES
TIMES = [0, 1, -1_000_000_001, 1_500_000_000_123_456_789, 2**31 * 10**9 + 999_999_999,
         2**33 * 10**9 + 5, 1_700_000_000_000_000_000]
MODES = [0o644, 0o600, 0o755, 0o000, 0o777, 0o4755, 0o2755, 0o1777, 0o444, 0o7777]
UIDS = [0, 1000, 65534, 12345]


def data(n, dseed):
    """n deterministic bytes; never all zero so holes are told apart."""
    out = bytearray()
    off = dseed % len(DATA)
    while len(out) < n:
        chunk = DATA[off:off + (n - len(out))]
        out += chunk
        off = 0
    return bytes(out) + b""


class Gen:
    """Random operations, from the seed alone."""

    def __init__(self, seed, chardev=False, avoid=(), tmpfile=False):
        self.r = random.Random(seed)
        self.chardev = chardev
        self.tmpfile = tmpfile
        self.avoid = set(avoid)
        self.times = TIMES
        if "negtime" in self.avoid:
            # Known bug: pre-1970 times with nanoseconds come back 1 s off.
            self.times = [t for t in TIMES if t >= 0 or t % 10**9 == 0] + [-10**9]
        # What the reference tree holds (fed back by the runner): biasing
        # choices toward existing names and open slots makes far fewer ops
        # fail trivially. The reference's behaviour is deterministic, so the
        # sequence still follows from the seed alone.
        self.existing = []
        self.dirs = [""]
        self.open_slots = set()

    def feedback(self, op, ref_result, ref_side=None):
        k = op[0]
        ok = not (isinstance(ref_result, list) and ref_result and ref_result[0] in ("E", "X"))
        if k == "open" and op[4] is not None and ok:
            self.open_slots.add(op[4])
        elif k == "tmpfile" and ok:
            self.open_slots.add(op[5])
        elif k == "close":
            self.open_slots.discard(op[1])
        if ref_side is not None:
            self.existing, self.dirs = ref_side.names()

    def path(self, trailing=True):
        r = self.r
        x = r.random()
        if x < 0.35 and self.existing:
            p = r.choice(self.existing)
        elif x < 0.7:
            parent = r.choice(self.dirs)
            p = (parent + "/" if parent else "") + r.choice(NAMES)
        else:
            depth = r.choices([1, 2, 3], [45, 40, 15])[0]
            p = "/".join(r.choice(NAMES) for _ in range(depth))
        if p.count("/") >= 3:  # at most three levels
            p = p.split("/", 1)[1]
        if trailing and r.random() < 0.04:
            p += "/"
        return p

    def slot(self):
        r = self.r
        if self.open_slots and r.random() < 0.9:
            return r.choice(sorted(self.open_slots))
        return r.randrange(SLOTS)

    def target(self):
        r = self.r
        # Relative, never "..", never absolute: whatever a symlink points
        # at, it resolves inside the work tree.
        x = r.random()
        if x < 0.1:
            return "."
        if x < 0.2:
            return "nonexistent"
        return self.path(trailing=False)

    def off(self):
        r = self.r
        k = r.randrange(5)
        if k == 0:
            return r.randrange(64)
        if k == 1:
            return max(0, 4096 * r.randrange(40) + r.randrange(-3, 4))
        if k == 2:
            return r.randrange(200_000)
        if k == 3:
            return 65536 * r.randrange(1, 5)
        return r.randrange(8192)

    def length(self):
        r = self.r
        k = r.randrange(5)
        if k == 0:
            return r.randrange(1, 17)
        if k == 1:
            return r.randrange(1, 6000)
        if k == 2:
            return 4096 * r.randrange(1, 6)
        if k == 3:
            return r.randrange(1, 70_000)
        return r.choice([0, 1, 4095, 4097])

    def size(self):
        r = self.r
        return r.choice([0, 0, 1, r.randrange(100), r.randrange(10_000), 4096, 8191,
                         r.randrange(300_000)])

    def oflags(self):
        r = self.r
        acc = r.choices([os.O_RDONLY, os.O_WRONLY, os.O_RDWR], [15, 15, 70])[0]
        fl = acc
        for f, p in ((os.O_CREAT, 0.5), (os.O_EXCL, 0.15), (os.O_TRUNC, 0.12),
                     (os.O_APPEND, 0.15), (os.O_DIRECTORY, 0.08), (os.O_NOFOLLOW, 0.1)):
            if r.random() < p:
                fl |= f
        if fl & os.O_DIRECTORY and r.random() < 0.8:
            fl &= ~(os.O_WRONLY | os.O_RDWR)
        return fl

    def one(self):
        r = self.r
        ops = [
            ("open", 14), ("close", 5), ("read", 5), ("write", 6), ("pread", 6),
            ("pwrite", 8), ("lseek", 3), ("ftruncate", 3), ("truncate", 3),
            ("fallocate", 4), ("fstat", 3), ("fsync", 1), ("fadvise", 2), ("fchmod", 1),
            ("futime", 1), ("fxattr", 2), ("flistdir", 1), ("copy_range", 2),
            ("rename", 7), ("renameat2", 4), ("link", 4), ("unlink", 5), ("mkdir", 7),
            ("rmdir", 3), ("symlink", 4), ("readlink", 2), ("chmod", 2), ("chown", 1),
            ("utime", 2), ("setxattr", 3), ("getxattr", 2), ("listxattr", 2),
            ("removexattr", 2), ("mknod", 2), ("listdir", 3), ("stat", 4), ("lstat", 4),
            ("access", 1), ("umask", 1), ("readfile", 2), ("probe", 6), ("acl", 3),
        ]
        if self.tmpfile:
            ops += [("tmpfile", 3), ("flink", 3)]
        kind = r.choices([k for k, _ in ops], [w for _, w in ops])[0]
        return self.make(kind)

    def make(self, kind):
        r = self.r
        slot = self.slot() if kind != "open" else r.randrange(SLOTS)
        if kind == "probe":
            inner = r.choice(["write", "pwrite", "ftruncate", "truncate", "fallocate",
                              "rename", "renameat2", "link", "unlink", "mkdir", "rmdir",
                              "symlink", "chmod", "setxattr", "mknod", "copy_range",
                              "open", "removexattr", "chown", "acl"]
                             + (["tmpfile", "flink"] if self.tmpfile else []))
            op = self.make(inner)
            if "falloc-mtime" in self.avoid and inner == "fallocate" and op[2] == FALLOC_FL_KEEP_SIZE:
                # Known divergence: memfs leaves mtime alone on a
                # KEEP_SIZE allocation; tmpfs and ext4 update it.
                op[2] = 0
            return ["probe", op]
        if kind == "open":
            keep = r.random() < 0.7
            return ["open", self.path(), self.oflags(), r.choice(MODES), slot if keep else None]
        if kind in ("close", "fstat", "fsync", "fadvise", "flistdir"):
            return [kind, slot]
        if kind == "read":
            return ["read", slot, self.length()]
        if kind == "write":
            return ["write", slot, self.length(), r.randrange(1 << 17)]
        if kind == "pread":
            return ["pread", slot, self.off(), self.length()]
        if kind == "pwrite":
            return ["pwrite", slot, self.off(), self.length(), r.randrange(1 << 17)]
        if kind == "lseek":
            whence = r.choice([os.SEEK_SET, os.SEEK_CUR, os.SEEK_END, SEEK_DATA, SEEK_HOLE])
            off = self.off()
            if whence in (os.SEEK_CUR, os.SEEK_END) and r.random() < 0.4:
                off = -off
            return ["lseek", slot, off, whence]
        if kind == "ftruncate":
            return ["ftruncate", slot, self.size()]
        if kind == "truncate":
            return ["truncate", self.path(), self.size()]
        if kind == "fallocate":
            mode = r.choice([0, 0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                             FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE])
            if "prealloc-blocks" in self.avoid and mode == FALLOC_FL_KEEP_SIZE:
                # Known memfs bug (seen with --blocks only): a truncate
                # that leaves the size below a KEEP_SIZE preallocation
                # frees it, even when it grows the file.
                mode = 0
            return ["fallocate", slot, mode, self.off(), self.length()]
        if kind == "fchmod":
            return ["fchmod", slot, r.choice(MODES)]
        if kind == "futime":
            return ["futime", slot, r.choice(self.times + [None]), r.choice(self.times)]
        if kind == "fxattr":
            return ["fxattr", slot, r.choice(["set", "get", "list", "remove"]),
                    r.choice(XNAMES), r.randrange(1 << 17), r.randrange(0, 40), r.choice([0, 0, 1, 2])]
        if kind == "copy_range":
            return ["copy_range", slot, self.slot(), self.off(), self.off(), self.length()]
        if kind in ("rename", "link"):
            return [kind, self.path(), self.path(), r.random() < 0.8]
        if kind == "renameat2":
            return ["renameat2", self.path(), self.path(),
                    r.choice([RENAME_NOREPLACE, RENAME_EXCHANGE, 0, RENAME_WHITEOUT,
                              RENAME_WHITEOUT | RENAME_NOREPLACE])]
        if kind in ("unlink", "rmdir", "readlink", "listdir", "readfile"):
            return [kind, self.path()]
        if kind == "mkdir":
            return ["mkdir", self.path(), r.choice(MODES[:5] + [0o755, 0o755, 0o2775, 0o1777])]
        if kind == "symlink":
            return ["symlink", self.target(), self.path()]
        if kind == "chmod":
            return ["chmod", self.path(), r.choice(MODES)]
        if kind == "chown":
            return ["chown", self.path(), r.choice(UIDS + [-1]), r.choice(UIDS + [-1]),
                    r.random() < 0.7]
        if kind == "utime":
            return ["utime", self.path(), r.choice(self.times + [None]), r.choice(self.times + [None]),
                    r.random() < 0.6]
        if kind == "setxattr":
            return ["setxattr", self.path(), r.choice(XNAMES), r.randrange(1 << 17),
                    r.randrange(0, 40), r.choice([0, 0, 1, 2]), r.random() < 0.8]
        if kind in ("getxattr", "removexattr"):
            return [kind, self.path(), r.choice(XNAMES), r.random() < 0.8]
        if kind == "listxattr":
            return ["listxattr", self.path(), r.random() < 0.8]
        if kind == "mknod":
            types = [stat.S_IFIFO, stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFREG]
            if self.chardev:
                types.append(stat.S_IFCHR)
            return ["mknod", self.path(), r.choice(types), r.choice(MODES[:5])]
        if kind in ("stat", "lstat"):
            return [kind, self.path()]
        if kind == "access":
            return ["access", self.path(), r.choice([os.F_OK, os.R_OK, os.W_OK, os.X_OK,
                                                    os.R_OK | os.X_OK])]
        if kind == "umask":
            return ["umask", r.choice([0o022, 0o022, 0o000, 0o077, 0o027])]
        if kind == "tmpfile":
            return ["tmpfile", r.choice(self.dirs + [self.path()]), r.choice(MODES),
                    r.choice([os.O_RDWR, os.O_RDWR, os.O_WRONLY, os.O_RDONLY]),
                    r.random() < 0.25, r.randrange(SLOTS)]
        if kind == "flink":
            return ["flink", self.slot(), self.path()]
        if kind == "acl":
            which = r.choice(["access", "access", "default"])
            return ["acl", self.path(), which, None if r.random() < 0.2 else self.acl(),
                    r.random() < 0.8]
        raise ValueError(kind)

    def acl(self):
        """A random POSIX ACL as (tag, perm, id) entries: mostly valid ones
        (named users and groups with a mask, or the minimal three), now
        and then one the kernel refuses (named entries without a mask)."""
        r = self.r
        perm = lambda: r.randrange(8)
        users = sorted(r.sample(UIDS[1:], r.choice([0, 0, 1, 2])))
        groups = sorted(r.sample(UIDS[1:], r.choice([0, 0, 1, 2])))
        named = bool(users or groups)
        mask = named if r.random() < 0.95 else not named
        if not named and r.random() < 0.2:
            mask = True
        e = [(ACL_USER_OBJ, perm(), -1)]
        e += [(ACL_USER, perm(), u) for u in users]
        e.append((ACL_GROUP_OBJ, perm(), -1))
        e += [(ACL_GROUP, perm(), g) for g in groups]
        if mask:
            e.append((ACL_MASK, perm(), -1))
        e.append((ACL_OTHER, perm(), -1))
        return e


# uvfs bugs this test found (all fixed in November 2026; --avoid steers
# clear of each, to look for others in builds from before the fixes);
# each is described where it is handled:
#   negtime          pre-1970 times with nanoseconds come back off by 1 s
#                    (fuser's SETATTR time conversion), memfs and passthrough
#   falloc-mtime     memfs: fallocate(KEEP_SIZE) leaves mtime alone
#   unlinked-special passthrough: fstat/futimens/fchmod/getdents on an open
#                    FIFO or directory whose last name is gone: ESTALE
#   prealloc-blocks  memfs (--blocks only): a truncate frees KEEP_SIZE
#                    preallocation past the new size even when growing
AVOIDABLE = {"negtime", "falloc-mtime", "unlinked-special",
             "prealloc-blocks"}


# ---------------------------------------------------------------- running

def st_summary(st):
    """The comparable part of a stat result (see the module docstring)."""
    fmt = stat.S_IFMT(st.st_mode)
    return {
        "mode": oct(st.st_mode),
        "nlink": st.st_nlink,
        # Directory sizes are file-system specific (module docstring).
        "size": None if fmt == stat.S_IFDIR else st.st_size,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "rdev": st.st_rdev if fmt in (stat.S_IFCHR, stat.S_IFBLK) else 0,
    }


class Side:
    def __init__(self, top, name, blocks=False, avoid=()):
        self.avoid = set(avoid)
        self.top = top
        self.name = name
        self.root = os.path.join(top, "w")
        self.fds = [None] * SLOTS
        self.blocks = blocks

    def p(self, rel):
        return os.path.join(self.root, rel)

    def stsum(self, st):
        s = st_summary(st)
        if self.blocks:
            s["blocks"] = st.st_blocks
        return s

    def reset(self):
        self.close_all()
        if os.path.lexists(self.root):
            shutil.rmtree(self.root)
        os.mkdir(self.root, 0o755)
        os.chmod(self.root, 0o755)

    def close_all(self):
        for i, fd in enumerate(self.fds):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
                self.fds[i] = None

    # Every op returns a JSON-able value; OSError becomes ["E", ERRNO].
    def run(self, op):
        try:
            return self._run(op)
        except OSError as e:
            return ["E", errno.errorcode.get(e.errno, str(e.errno))]
        except (ValueError, OverflowError, NotImplementedError) as e:
            return ["X", type(e).__name__]

    def _fd(self, slot):
        fd = self.fds[slot]
        if fd is None:
            raise OSError(errno.EBADF, "empty slot")
        return fd

    def _run(self, op):
        k = op[0]
        if k == "probe":
            return self.probe(op[1])
        if k == "open":
            _, path, flags, mode, slot = op
            fd = os.open(self.p(path), flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
            st = self.stsum(os.fstat(fd))
            if "unlinked-special" in self.avoid and not stat.S_ISREG(os.fstat(fd).st_mode):
                # Known passthrough bug: fstat, futimens, fchmod, getdents
                # on a FIFO or directory fd whose last name is gone fail
                # with ESTALE; keep no such fds.
                slot = None
            if slot is None:
                os.close(fd)
            else:
                if self.fds[slot] is not None:
                    os.close(self.fds[slot])
                self.fds[slot] = fd
            return ["fd", st]
        if k == "close":
            fd = self._fd(op[1])
            self.fds[op[1]] = None
            os.close(fd)
            return "ok"
        if k == "tmpfile":
            _, path, mode, acc, excl, slot = op
            flags = os.O_TMPFILE | acc | os.O_CLOEXEC | (os.O_EXCL if excl else 0)
            fd = os.open(self.p(path), flags, mode)
            if self.fds[slot] is not None:
                os.close(self.fds[slot])
            self.fds[slot] = fd
            return ["fd", self.stsum(os.fstat(fd))]
        if k == "flink":
            # linkat(fd, "", AT_FDCWD, path, AT_EMPTY_PATH): names an
            # O_TMPFILE file (not one made with O_EXCL), never a file whose
            # last name was removed.
            _, slot, path = op
            _check(_linkat(self._fd(slot), b"", AT_FDCWD, os.fsencode(self.p(path)), AT_EMPTY_PATH))
            return self.stsum(os.lstat(self.p(path)))
        if k == "read":
            fd = self._fd(op[1])
            b = os.read(fd, op[2])
            return [b, os.lseek(fd, 0, os.SEEK_CUR)]
        if k == "write":
            fd = self._fd(op[1])
            n = os.write(fd, data(op[2], op[3]))
            return [n, os.lseek(fd, 0, os.SEEK_CUR)]
        if k == "pread":
            return os.pread(self._fd(op[1]), op[3], op[2])
        if k == "pwrite":
            fd = self._fd(op[1])
            n = os.pwrite(fd, data(op[3], op[4]), op[2])
            return [n, os.lseek(fd, 0, os.SEEK_CUR)]
        if k == "lseek":
            fd = self._fd(op[1])
            _, _, off, whence = op
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                # Directory offsets are opaque cookies and lseek on a
                # directory is the file system's own (tmpfs's
                # dcache_dir_lseek rejects SEEK_END/DATA/HOLE, FUSE uses
                # the generic one): not comparable.
                os.lseek(fd, 0, os.SEEK_SET)
                return "dir"
            if whence in (SEEK_DATA, SEEK_HOLE):
                size = os.fstat(fd).st_size
                try:
                    r = os.lseek(fd, off, whence)
                except OSError as e:
                    if not (e.errno == errno.ENXIO and whence == SEEK_DATA and 0 <= off < size):
                        raise
                    # No data after off: a file of only holes (tmpfs counts
                    # fallocated, never written pages as holes).
                    r = size
                # Positions may legitimately differ (module docstring):
                # compare the range only, and put the offset back in step.
                os.lseek(fd, off, os.SEEK_SET)
                return "in-range" if off <= r <= size else ["out-of-range", r, size]
            return os.lseek(fd, off, whence)
        if k == "ftruncate":
            os.ftruncate(self._fd(op[1]), op[2])
            return "ok"
        if k == "truncate":
            os.truncate(self.p(op[1]), op[2])
            return "ok"
        if k == "fallocate":
            _, slot, mode, off, length = op
            fallocate(self._fd(slot), mode, off, length)
            return "ok"
        if k == "fstat":
            return self.stsum(os.fstat(self._fd(op[1])))
        if k == "fsync":
            os.fsync(self._fd(op[1]))
            return "ok"
        if k == "fadvise":
            # Drops the FUSE page cache of the file, so the next read asks
            # the server; tmpfs ignores it (noop backing device).
            os.posix_fadvise(self._fd(op[1]), 0, 0, os.POSIX_FADV_DONTNEED)
            return "ok"
        if k == "fchmod":
            os.fchmod(self._fd(op[1]), op[2])
            return "ok"
        if k == "futime":
            fd = self._fd(op[1])
            futimens(fd, op[2], op[3])
            st = os.fstat(fd)
            return [st.st_atime_ns if op[2] is not None else None, st.st_mtime_ns]
        if k == "fxattr":
            _, slot, what, name, dseed, n, flags = op
            fd = self._fd(slot)
            return self.xattr(fd, what, name, dseed, n, flags, True)
        if k == "flistdir":
            return sorted(os.listdir(self._fd(op[1])))
        if k == "copy_range":
            _, si, so, oi, oo, n = op
            return os.copy_file_range(self._fd(si), self._fd(so), n, oi, oo)
        if k == "rename":
            os.rename(self.p(op[1]), self.p(op[2]))
            return "ok"
        if k == "renameat2":
            renameat2(self.p(op[1]), self.p(op[2]), op[3])
            return "ok"
        if k == "link":
            os.link(self.p(op[1]), self.p(op[2]), follow_symlinks=op[3])
            return "ok"
        if k == "unlink":
            os.unlink(self.p(op[1]))
            return "ok"
        if k == "rmdir":
            os.rmdir(self.p(op[1]))
            return "ok"
        if k == "mkdir":
            os.mkdir(self.p(op[1]), op[2])
            return self.stsum(os.lstat(self.p(op[1])))
        if k == "symlink":
            os.symlink(op[1], self.p(op[2]))
            return self.stsum(os.lstat(self.p(op[2])))
        if k == "readlink":
            return os.readlink(self.p(op[1]))
        if k == "chmod":
            os.chmod(self.p(op[1]), op[2])
            return self.stsum(os.stat(self.p(op[1])))
        if k == "chown":
            _, path, uid, gid, follow = op
            os.chown(self.p(path), uid, gid, follow_symlinks=follow)
            return self.stsum(os.stat(self.p(path), follow_symlinks=follow))
        if k == "utime":
            _, path, at, mt, follow = op
            utimens(self.p(path), at, mt, follow)
            st = os.stat(self.p(path), follow_symlinks=follow)
            # Only the explicitly set times are compared; and not a
            # symlink's atime: resolving a path that passes through the same
            # symlink again (a -> . loops) touches it under relatime on
            # tmpfs/ext4, while FUSE symlinks get no atime updates.
            if stat.S_ISLNK(st.st_mode):
                at = None
            return [st.st_atime_ns if at is not None else None,
                    st.st_mtime_ns if mt is not None else None]
        if k in ("setxattr", "getxattr", "removexattr", "listxattr"):
            if k == "setxattr":
                _, path, name, dseed, n, flags, follow = op
                what = "set"
            elif k == "listxattr":
                _, path, follow = op
                what, name, dseed, n, flags = "list", None, 0, 0, 0
            else:
                _, path, name, follow = op
                what, dseed, n, flags = k[:-5], 0, 0, 0
            return self.xattr(self.p(path), what, name, dseed, n, flags, follow)
        if k == "mknod":
            _, path, typ, mode = op
            dev = os.makedev(1, 3) if typ == stat.S_IFCHR else 0
            os.mknod(self.p(path), typ | mode, dev)
            return self.stsum(os.lstat(self.p(path)))
        if k == "listdir":
            return sorted(os.listdir(self.p(op[1])))
        if k == "stat":
            return self.stsum(os.stat(self.p(op[1])))
        if k == "lstat":
            return self.stsum(os.lstat(self.p(op[1])))
        if k == "access":
            return os.access(self.p(op[1]), op[2])
        if k == "umask":
            os.umask(op[1])
            return "ok"
        if k == "acl":
            _, path, which, entries, follow = op
            name = "system.posix_acl_" + which
            if entries is None:
                os.removexattr(self.p(path), name, follow_symlinks=follow)
            else:
                value = (2).to_bytes(4, "little") + b"".join(
                    t.to_bytes(2, "little") + p.to_bytes(2, "little") + (i & 0xffffffff).to_bytes(4, "little")
                    for t, p, i in entries)
                os.setxattr(self.p(path), name, value, follow_symlinks=follow)
            st = os.stat(self.p(path), follow_symlinks=follow)
            acls = {}
            for n in ("system.posix_acl_access", "system.posix_acl_default"):
                try:
                    acls[n] = os.getxattr(self.p(path), n, follow_symlinks=follow).hex()
                except OSError as e:
                    acls[n] = errno.errorcode.get(e.errno)
            return [self.stsum(st), acls]
        if k == "readfile":
            fd = os.open(self.p(op[1]), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                return read_all(fd)
            finally:
                os.close(fd)
        raise ValueError("unknown op " + k)

    def xattr(self, target, what, name, dseed, n, flags, follow):
        if what == "set":
            os.setxattr(target, name, data(n, dseed), flags, follow_symlinks=follow)
            return "ok"
        if what == "get":
            return os.getxattr(target, name, follow_symlinks=follow)
        if what == "remove":
            os.removexattr(target, name, follow_symlinks=follow)
            return "ok"
        return sorted(os.listxattr(target, follow_symlinks=follow))

    def involved(self, op):
        """Paths (with their parents) and fds a probed op touches."""
        paths, fds = [], []
        k = op[0]
        if k in ("write", "pwrite", "ftruncate", "fallocate"):
            fds.append(op[1])
        elif k == "copy_range":
            fds += [op[1], op[2]]
        elif k == "symlink":
            paths.append(op[2])
        elif k in ("rename", "renameat2", "link"):
            paths += [op[1], op[2]]
        elif k == "flink":
            fds.append(op[1])
            paths.append(op[2])
        else:
            paths.append(op[1])
        full = []
        for p in paths:
            p = p.rstrip("/")
            full.append(p)
            full.append(os.path.dirname(p))
        return sorted(set(full)), sorted(set(fds))

    def probe(self, inner):
        """Set a sentinel mtime on everything `inner` touches, run it, and
        report which mtimes moved (the clock values themselves are not
        comparable; whether an operation updates mtime is)."""
        paths, slots = self.involved(inner)
        if inner[0] == "truncate":
            # truncate(2) to the current size: POSIX requires an mtime
            # update only "if the file size is changed"; tmpfs then leaves
            # mtime alone, ext4 and memfs update it. Both are allowed.
            try:
                if os.stat(self.p(inner[1])).st_size == inner[2]:
                    paths = [q for q in paths if q != inner[1].rstrip("/")]
            except OSError:
                pass
        for p in paths:
            try:
                utimens(self.p(p), None, SENTINEL_NS, False)
            except OSError:
                pass
        for s in slots:
            if self.fds[s] is not None:
                try:
                    futimens(self.fds[s], None, SENTINEL_NS)
                except OSError:
                    pass
        res = self.run(inner)
        if (inner[0] == "renameat2" and inner[3] & RENAME_WHITEOUT
                and isinstance(res, list) and res and res[0] == "E"):
            # ext4 moves the parent's mtime on a RENAME_WHITEOUT that fails
            # (it makes the whiteout first and puts the old entry back);
            # tmpfs does not. Either is allowed; the errno is compared.
            paths = []
        moved = {}
        for p in paths:
            try:
                st = os.lstat(self.p(p))
                # FIFOs: see the fd case below.
                moved[p or "."] = "fifo" if stat.S_ISFIFO(st.st_mode) else \
                    st.st_mtime_ns != SENTINEL_NS
            except OSError as e:
                moved[p or "."] = errno.errorcode.get(e.errno)
        for s in slots:
            if self.fds[s] is not None:
                st = os.fstat(self.fds[s])
                if stat.S_ISFIFO(st.st_mode):
                    # pipe_write()'s file_update_time() changes only the
                    # kernel's inode; a FUSE inode's next getattr asks the
                    # server, which never saw the pipe I/O. Kernel FUSE
                    # behaviour, not the server's.
                    continue
                moved["fd%d" % s] = st.st_mtime_ns != SENTINEL_NS
        return [res, moved]

    def names(self):
        """Existing paths and directories of the tree (for Gen)."""
        paths, dirs = [], [""]
        for top, ds, fs in os.walk(self.root):
            rel = os.path.relpath(top, self.root)
            rel = "" if rel == "." else rel
            for n in sorted(ds) + sorted(fs):
                paths.append(os.path.join(rel, n) if rel else n)
            for n in sorted(ds):
                if rel.count("/") < 1:
                    dirs.append(os.path.join(rel, n) if rel else n)
            ds.sort()
        return sorted(paths), sorted(dirs)

    # Full-tree snapshot.
    def snapshot(self):
        out = {}
        ino_first = {}

        def walk(rel):
            full = self.p(rel) if rel else self.root
            for name in sorted(os.listdir(full)):
                r = os.path.join(rel, name) if rel else name
                fp = self.p(r)
                st = os.lstat(fp)
                e = self.stsum(st)
                # Hard-link structure: which earlier path shares the inode.
                e["same_as"] = ino_first.setdefault(st.st_ino, r)
                fmt = stat.S_IFMT(st.st_mode)
                if fmt == stat.S_IFLNK:
                    e["target"] = os.readlink(fp)
                if fmt != stat.S_IFLNK:
                    e["xattrs"] = {n: os.getxattr(fp, n, follow_symlinks=False)
                                   for n in sorted(os.listxattr(fp, follow_symlinks=False))}
                if fmt == stat.S_IFREG:
                    fd = os.open(fp, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
                    try:
                        e["data"] = read_all(fd)
                    finally:
                        os.close(fd)
                out[r] = e
                if fmt == stat.S_IFDIR:
                    walk(r)

        try:
            walk("")
        except OSError as e:
            # Reported as a difference (the reference walk fails only if
            # the kernel file system does too).
            out["<walk error>"] = {"error": "%s: %s" % (errno.errorcode.get(e.errno),
                                                        e.filename)}
        out["."] = {"nlink": os.lstat(self.root).st_nlink,
                    "xattrs": sorted(os.listxattr(self.root))}
        for i, fd in enumerate(self.fds):
            if fd is not None:
                # Open files, including unlinked and renamed ones.
                try:
                    out["<fd%d>" % i] = self.stsum(os.fstat(fd))
                except OSError as e:
                    out["<fd%d>" % i] = {"error": errno.errorcode.get(e.errno)}
        return out


def read_all(fd):
    chunks = []
    off = 0
    while True:
        b = os.pread(fd, 1 << 20, off)
        if not b:
            return b"".join(chunks)
        chunks.append(b)
        off += len(b)


# ---------------------------------------------------------------- reporting

def short(v, limit=300):
    """A readable rendering of a result (bytes summarised)."""
    if isinstance(v, (bytes, bytearray)):
        nz = sum(1 for x in v if x)
        head = v[:24].hex()
        return "<%d bytes, %d nonzero, head %s%s>" % (len(v), nz, head,
                                                       "..." if len(v) > 24 else "")
    if isinstance(v, list):
        return "[" + ", ".join(short(x, limit) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join("%s: %s" % (k, short(x, limit)) for k, x in v.items()) + "}"
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + "..."


def first_byte_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def diff_snapshots(a, b):
    """Human-readable differences of two snapshots (at most 15)."""
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in a:
            out.append("%s: only in reference: %s" % (k, short(b[k])))
        elif k not in b:
            out.append("%s: only in target: %s" % (k, short(a[k])))
        elif a[k] != b[k]:
            for f in sorted(set(a[k]) | set(b[k])):
                x, y = a[k].get(f), b[k].get(f)
                if x != y:
                    extra = ""
                    if isinstance(x, bytes) and isinstance(y, bytes):
                        extra = " (first difference at byte %d)" % first_byte_diff(x, y)
                    out.append("%s: %s: target %s, reference %s%s"
                               % (k, f, short(x), short(y), extra))
        if len(out) >= 15:
            break
    return out


def fmt_op(op):
    return json.dumps(op)


class Divergence(Exception):
    def __init__(self, index, op, tres, rres, detail=None):
        super().__init__("divergence")
        self.index, self.op, self.tres, self.rres, self.detail = index, op, tres, rres, detail

    def signature(self):
        if self.op is None:
            return ("tree",)
        op = self.op
        if op[0] == "probe":
            return ("probe", op[1][0])
        return (op[0],)


def execute(t, r, ops, check_every, verbose=False, gen=None, count=0):
    """Run ops on both sides, comparing; raises Divergence. With gen, the
    operations are generated as we go (count of them) and appended to ops."""
    n = count if gen is not None else len(ops)
    for i in range(n):
        if gen is not None:
            ops.append(gen.one())
        op = ops[i]
        mask = os.umask(0)
        os.umask(mask)
        a = t.run(op)
        os.umask(mask)  # both sides see the same umask
        b = r.run(op)
        if verbose:
            print("%5d %s -> %s" % (i, fmt_op(op), short(a, 120)), flush=True)
        if a != b:
            raise Divergence(i, op, a, b)
        if gen is not None:
            gen.feedback(op, b, r if i % 10 == 9 else None)
        if DROP_CACHES_EVERY and (i + 1) % DROP_CACHES_EVERY == 0:
            drop_caches()
        if check_every and (i + 1) % check_every == 0:
            tree_check(t, r, i)
    tree_check(t, r, n - 1)


DROP_CACHES_EVERY = 0


def drop_caches():
    """Have the kernel forget unused dentries and inodes (FUSE FORGETs, so
    the server's node table and recycling get exercised). System-wide."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")


def tree_check(t, r, i):
    sa, sb = t.snapshot(), r.snapshot()
    if sa != sb:
        raise Divergence(i, None, None, None, diff_snapshots(sa, sb))


def report(seed, d, ops, minimized=None):
    print("DIVERGENCE  seed=%s  op index=%d" % (seed, d.index))
    if d.op is None:
        print("  full-tree comparison after op %d differs:" % d.index)
        for line in d.detail:
            print("    " + line)
    else:
        print("  op:        %s" % fmt_op(d.op))
        print("  target:    %s" % short(d.tres))
        print("  reference: %s" % short(d.rres))
        if isinstance(d.tres, bytes) and isinstance(d.rres, bytes):
            print("  first differing byte: %d" % first_byte_diff(d.tres, d.rres))
    lo = max(0, d.index - 20)
    print("  last operations (index: op):")
    for j in range(lo, min(d.index + 1, len(ops))):
        print("    %5d: %s" % (j, fmt_op(ops[j])))
    print("  replay: difftest.py TARGET REF --seed %s --ops %d" % (seed, d.index + 1))
    if minimized is not None:
        print("  minimized (%d ops, each run from an empty tree):" % len(minimized))
        for op in minimized:
            print("    %s" % fmt_op(op))


# ---------------------------------------------------------------- minimizing

def reproduces(t, r, ops, sig):
    t.reset()
    r.reset()
    os.umask(0o022)
    try:
        execute(t, r, ops, 0)
    except Divergence as d:
        return d.signature() == sig, d
    return False, None


def minimize(t, r, ops, d, budget=4000):
    sig = d.signature()
    cur = list(ops[:d.index + 1])
    ok, d2 = reproduces(t, r, cur, sig)
    if not ok:
        return None
    cur = cur[:d2.index + 1]
    tries = 0
    n = 2
    while len(cur) >= 2 and tries < budget:
        chunk = max(1, len(cur) // n)
        progress = False
        i = 0
        while i < len(cur) and tries < budget:
            cand = cur[:i] + cur[i + chunk:]
            tries += 1
            ok, d2 = reproduces(t, r, cand, sig) if cand else (False, None)
            if ok:
                cur = cand[:d2.index + 1]
                progress = True
            else:
                i += chunk
        if not progress:
            if chunk == 1:
                break
            n = min(len(cur), n * 2)
    return cur


# ---------------------------------------------------------------- main

def usage_error(msg):
    print("difftest: " + msg, file=sys.stderr)
    sys.exit(2)


def check_empty(d):
    if not os.path.isdir(d):
        usage_error("%s is not a directory" % d)
    if os.listdir(d):
        usage_error("%s is not empty" % d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("reference")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seeds", type=int, default=1, help="run this many seeds from --seed on")
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--check-every", type=int, default=100)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--minimize", action="store_true",
                    help="on a divergence, cut the operations down to a short reproducer")
    ap.add_argument("--dump", help="write the (minimized) operations as JSON here")
    ap.add_argument("--replay", help="run the JSON operation list in this file instead")
    ap.add_argument("--blocks", action="store_true", help="also compare st_blocks")
    ap.add_argument("--chardev", action="store_true", help="also mknod character devices")
    ap.add_argument("--tmpfile", action="store_true",
                    help="also make O_TMPFILE files and name them with linkat (both sides must support it)")
    ap.add_argument("--avoid", action="append", default=[], choices=sorted(AVOIDABLE),
                    help="steer clear of a known bug, to look for others (repeatable)")
    ap.add_argument("--keep", action="store_true", help="leave the work trees behind")
    ap.add_argument("--drop-caches", type=int, default=0, metavar="N",
                    help="every N ops write 2 to /proc/sys/vm/drop_caches (root; system-wide)")
    a = ap.parse_args()
    global DROP_CACHES_EVERY
    DROP_CACHES_EVERY = a.drop_caches
    for d in (a.target, a.reference):
        check_empty(d)
    if os.path.realpath(a.target) == os.path.realpath(a.reference):
        usage_error("the two directories must differ")
    seed0 = a.seed if a.seed is not None else int(time.time()) % 1_000_000
    t = Side(a.target, "target", a.blocks, a.avoid)
    r = Side(a.reference, "reference", a.blocks, a.avoid)
    status = 0
    t0 = time.time()
    try:
        for seed in range(seed0, seed0 + a.seeds):
            g = None
            ops = []
            if a.replay:
                with open(a.replay) as f:
                    ops = json.load(f)
            else:
                g = Gen(seed, a.chardev, a.avoid, a.tmpfile)
            t.reset()
            r.reset()
            os.umask(0o022)
            try:
                execute(t, r, ops, a.check_every, a.verbose, g, a.ops)
            except Divergence as d:
                t.close_all()
                r.close_all()
                mini = minimize(t, r, ops, d) if a.minimize else None
                report(seed, d, ops, mini)
                if a.dump:
                    with open(a.dump, "w") as f:
                        json.dump(mini if mini is not None else ops[:d.index + 1], f)
                status = 1
                break
            if a.verbose or a.seeds > 1:
                print("seed %d: %d ops OK" % (seed, len(ops)), flush=True)
            if a.replay:
                break
    finally:
        t.close_all()
        r.close_all()
        if not a.keep:
            for s in (t, r):
                if os.path.lexists(s.root):
                    shutil.rmtree(s.root, ignore_errors=True)
    if status == 0:
        print("OK: seeds %d..%d, %d ops each, no divergence (%.1fs)"
              % (seed0, seed0 + a.seeds - 1, a.ops, time.time() - t0))
    return status


if __name__ == "__main__":
    sys.exit(main())
