#!/usr/bin/env python3
"""Differential coherence stress for a passthrough mount.

    coherence-stress.py SRC MNT [--ops N] [--batch B] [--window-ms W]
                        [--readers R] [--seed S]

SRC is the source directory of a passthrough mount on MNT (mounted by the
caller, with default options: its kernel caches names and attributes for
long and relies on the server's host-change watcher). This process changes
SRC directly, as a program on the host would: creates, overwrites,
appends, truncates, unlinks, renames (within and across directories),
hard links, chmod, chown, utimes, set/remove extended attributes, mkdir
and rmdir, B random operations per batch, N in all. Meanwhile R reader
threads stat, read and list random paths through MNT, so the kernel keeps
caching and its lookups race the host's changes. After each batch, once W
milliseconds have passed, every path the batch touched (and its
directory) is compared on both sides: existence, type, mode, owner, size,
link count, mtime, contents, the extended attribute `user.k` and, for a
directory, its entry names. Any difference is a stale result.

Prints the totals; exits 1 on any stale result.
"""

import argparse
import errno
import hashlib
import os
import random
import sys
import threading
import time

DIRS = 8
NAMES = 40
SUBS = 4


def paths(rng):
    d = f"d{rng.randrange(DIRS)}"
    return d, f"{d}/n{rng.randrange(NAMES)}"


def snapshot(root, rel):
    """What `rel` looks like under `root`, as comparable data."""
    p = os.path.join(root, rel)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None
    except OSError as e:
        return ("error", e.errno)
    kind = st.st_mode & 0o170000
    out = {
        "kind": kind,
        "mode": st.st_mode & 0o7777,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "nlink": st.st_nlink if kind != 0o040000 else None,
        "mtime": st.st_mtime_ns,
    }
    if kind == 0o100000:
        out["size"] = st.st_size
        try:
            with open(p, "rb") as f:
                out["data"] = hashlib.sha1(f.read()).hexdigest()
        except OSError as e:
            out["data"] = ("error", e.errno)
    elif kind == 0o040000:
        try:
            out["names"] = sorted(os.listdir(p))
        except OSError as e:
            out["names"] = ("error", e.errno)
    try:
        out["xattr"] = os.getxattr(p, "user.k", follow_symlinks=False)
    except OSError as e:
        out["xattr"] = e.errno if e.errno != errno.ENODATA else None
    return out


def host_op(rng, src, touched):
    """One random change of the source; records the paths it touched."""
    d, rel = paths(rng)
    p = os.path.join(src, rel)
    op = rng.randrange(13)
    touched.add(d)
    touched.add(rel)
    try:
        if op <= 1:
            with open(p, "wb") as f:
                f.write(rng.randbytes(rng.randrange(4096)))
        elif op == 2:
            with open(p, "ab") as f:
                f.write(rng.randbytes(rng.randrange(1, 512)))
        elif op == 3:
            os.truncate(p, rng.randrange(2048))
        elif op == 4:
            os.unlink(p)
        elif op == 5:
            d2, rel2 = paths(rng)
            touched.update((d2, rel2))
            os.rename(p, os.path.join(src, rel2))
        elif op == 6:
            d2, rel2 = paths(rng)
            touched.update((d2, rel2))
            os.link(p, os.path.join(src, rel2))
        elif op == 7:
            os.chmod(p, rng.choice([0o600, 0o644, 0o755, 0o640]))
        elif op == 8:
            os.chown(p, rng.randrange(3), rng.randrange(3), follow_symlinks=False)
        elif op == 9:
            t = rng.randrange(1, 2_000_000_000) * 1_000_000_000 + rng.randrange(10**9)
            os.utime(p, ns=(t, t), follow_symlinks=False)
        elif op == 10:
            if rng.random() < 0.7:
                os.setxattr(p, "user.k", rng.randbytes(rng.randrange(1, 16)), follow_symlinks=False)
            else:
                os.removexattr(p, "user.k", follow_symlinks=False)
        elif op == 11:
            s = f"{d}/s{rng.randrange(SUBS)}"
            touched.add(s)
            os.mkdir(os.path.join(src, s))
        else:
            s = f"{d}/s{rng.randrange(SUBS)}"
            touched.add(s)
            os.rmdir(os.path.join(src, s))
    except OSError:
        pass  # a name that is not there, a directory in the way, ...


def reader(mnt, seed, stop, counts):
    rng = random.Random(seed)
    n = 0
    while not stop.is_set():
        d, rel = paths(rng)
        p = os.path.join(mnt, rel if rng.random() < 0.8 else d)
        try:
            r = rng.randrange(3)
            if r == 0:
                os.lstat(p)
            elif r == 1:
                with open(p, "rb") as f:
                    f.read(256)
            else:
                os.listdir(p)
        except OSError:
            pass
        n += 1
    counts.append(n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("mnt")
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=25)
    ap.add_argument("--window-ms", type=float, default=50.0)
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for i in range(DIRS):
        os.makedirs(os.path.join(a.src, f"d{i}"), exist_ok=True)
    # The kernel caches the whole tree before the host starts changing it.
    for root, dirs, files in os.walk(a.mnt):
        for f in files:
            os.lstat(os.path.join(root, f))
    stop = threading.Event()
    counts = []
    threads = [
        threading.Thread(target=reader, args=(a.mnt, a.seed * 100 + i, stop, counts))
        for i in range(a.readers)
    ]
    for t in threads:
        t.start()
    done = stale = checked = 0
    t0 = time.monotonic()
    try:
        while done < a.ops:
            touched = set()
            for _ in range(min(a.batch, a.ops - done)):
                host_op(rng, a.src, touched)
                done += 1
            time.sleep(a.window_ms / 1000.0)
            for rel in sorted(touched):
                checked += 1
                want = snapshot(a.src, rel)
                got = snapshot(a.mnt, rel)
                if want != got:
                    # The host may not have been quiet for the whole check:
                    # it was (this process is the only mutator), so any
                    # difference is a stale answer from the mount.
                    stale += 1
                    if stale <= 10:
                        print(f"STALE {rel}: host {want} mount {got}", file=sys.stderr)
    finally:
        stop.set()
        for t in threads:
            t.join()
    secs = time.monotonic() - t0
    print(
        f"coherence-stress: {done} host operations in {secs:.1f}s, {checked} paths checked "
        f"after a {a.window_ms:g} ms window, {sum(counts)} concurrent reads through the mount, "
        f"{stale} stale"
    )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
