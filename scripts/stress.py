#!/usr/bin/env python3
"""Multi-process namespace stress for a uvfs mount.

Several processes hammer a small shared namespace (a few directories, a
few names each) with lookups (stat), creates, writes, copies
(copy_file_range, which memfs serves itself), renames (within and across
directories), hard links, unlinks, mkdir/rmdir and readdir, while
one process keeps asking the kernel to drop its dentry and inode caches so
that FORGETs race with lookups. Errors that concurrency makes legitimate
(ENOENT, EEXIST, ENOTEMPTY, ...) are counted, anything else fails the run.

Usage: stress.py MOUNTDIR SECONDS PROCESSES
"""
import errno
import os
import random
import sys
import time
from multiprocessing import Process, Queue

EXPECTED = {errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR,
            errno.ENOTDIR, errno.EINVAL, errno.EBUSY}
DIRS = 4
NAMES = 24


def worker(root, secs, seed, q):
    rnd = random.Random(seed)
    ops = {}
    unexpected = []
    deadline = time.time() + secs

    def path():
        return os.path.join(root, f"d{rnd.randrange(DIRS)}", f"n{rnd.randrange(NAMES)}")

    while time.time() < deadline:
        op = rnd.choice(["stat", "stat", "stat", "create", "write", "copy", "rename",
                         "rename", "link", "unlink", "mkdir", "rmdir", "readdir",
                         "symlink"])
        try:
            if op == "stat":
                os.lstat(path())
            elif op == "create":
                fd = os.open(path(), os.O_CREAT | os.O_WRONLY, 0o644)
                os.close(fd)
            elif op == "write":
                fd = os.open(path(), os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, b"x" * rnd.randrange(1, 9000))
                finally:
                    os.close(fd)
            elif op == "copy":
                src = os.open(path(), os.O_RDONLY)
                try:
                    dst = os.open(path(), os.O_WRONLY)
                    try:
                        # Within one file the ranges may overlap: EINVAL.
                        os.copy_file_range(src, dst, rnd.randrange(1, 20000),
                                           rnd.randrange(0, 9000), rnd.randrange(0, 9000))
                    finally:
                        os.close(dst)
                finally:
                    os.close(src)
            elif op == "rename":
                os.rename(path(), path())
            elif op == "link":
                os.link(path(), path())
            elif op == "unlink":
                os.unlink(path())
            elif op == "mkdir":
                os.mkdir(path())
            elif op == "rmdir":
                os.rmdir(path())
            elif op == "readdir":
                for e in os.scandir(os.path.join(root, f"d{rnd.randrange(DIRS)}")):
                    try:
                        e.stat(follow_symlinks=False)
                    except OSError as err:
                        if err.errno not in EXPECTED:
                            raise
            elif op == "symlink":
                os.symlink("target", path())
            ops[op] = ops.get(op, 0) + 1
        except OSError as e:
            # link(2) of a directory is EPERM by POSIX.
            if e.errno in EXPECTED or (op == "link" and e.errno == errno.EPERM):
                ops[op + "_err"] = ops.get(op + "_err", 0) + 1
            else:
                unexpected.append(f"{op}: {e}")
    q.put((ops, unexpected[:20], len(unexpected)))


def forgetter(secs):
    deadline = time.time() + secs
    while time.time() < deadline:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("2")
        except OSError:
            return
        time.sleep(0.2)


def main():
    root, secs, nproc = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    os.makedirs(root, exist_ok=True)
    for d in range(DIRS):
        os.makedirs(os.path.join(root, f"d{d}"), exist_ok=True)
    q = Queue()
    procs = [Process(target=worker, args=(root, secs, s, q)) for s in range(nproc)]
    procs.append(Process(target=forgetter, args=(secs,)))
    for p in procs:
        p.start()
    total, bad = {}, 0
    for _ in range(nproc):
        ops, unexpected, n = q.get()
        for k, v in ops.items():
            total[k] = total.get(k, 0) + v
        for u in unexpected:
            print("unexpected:", u)
        bad += n
    for p in procs:
        p.join()
    done = sum(v for k, v in total.items() if not k.endswith("_err"))
    errs = sum(v for k, v in total.items() if k.endswith("_err"))
    print(f"stress: {nproc} processes, {secs:.0f}s, {done} ops ok, {errs} expected errors, {bad} unexpected")
    print("stress ops:", " ".join(f"{k}={v}" for k, v in sorted(total.items())))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
