#!/usr/bin/env python3
"""File handles of a mount (name_to_handle_at) that must keep opening the
right files (open_by_handle_at) after the kernel and the server forgot
them: drop_caches, a live upgrade (issue 28).

  handles-check.py save  MNT N STATE   # makes MNT/h/f0..f{N-1}, saves handles
  handles-check.py check MNT STATE     # every handle opens its file
  handles-check.py gone  MNT STATE K   # the handle of file K answers ESTALE

Each file holds its own name, so a handle opening another file shows.
"""
import ctypes
import ctypes.util
import errno
import json
import os
import sys

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
MAX_HANDLE_SZ = 128
AT_FDCWD = -100


class FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int),
                ("f_handle", ctypes.c_ubyte * MAX_HANDLE_SZ)]


def name_to_handle(path):
    fh = FileHandle()
    fh.handle_bytes = MAX_HANDLE_SZ
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, path.encode(), ctypes.byref(fh),
                              ctypes.byref(mount_id), 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"name_to_handle_at {path}: {os.strerror(e)}")
    return [fh.handle_type, bytes(fh.f_handle[:fh.handle_bytes]).hex()]


def open_handle(mount_fd, h):
    fh = FileHandle()
    raw = bytes.fromhex(h[1])
    fh.handle_bytes = len(raw)
    fh.handle_type = h[0]
    ctypes.memmove(fh.f_handle, raw, len(raw))
    fd = libc.open_by_handle_at(mount_fd, ctypes.byref(fh), os.O_RDONLY)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return fd


def main():
    mode, mnt = sys.argv[1], sys.argv[2]
    if mode == "save":
        n, state = int(sys.argv[3]), sys.argv[4]
        d = os.path.join(mnt, "h")
        os.makedirs(d, exist_ok=True)
        handles = {}
        for i in range(n):
            p = os.path.join(d, f"f{i}")
            with open(p, "w") as f:
                f.write(f"f{i}")
            handles[f"f{i}"] = name_to_handle(p)
        with open(state, "w") as f:
            json.dump(handles, f)
        print(f"saved {n} handles")
        return 0
    state = sys.argv[3]
    with open(state) as f:
        handles = json.load(f)
    mount_fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    if mode == "check":
        bad = 0
        for name, h in handles.items():
            try:
                fd = open_handle(mount_fd, h)
            except OSError as e:
                bad += 1
                if bad <= 5:
                    print(f"{name}: {e}")
                continue
            got = os.read(fd, 64).decode(errors="replace")
            os.close(fd)
            if got != name:
                bad += 1
                if bad <= 5:
                    print(f"{name}: opened a file holding {got!r}")
        print(f"{len(handles) - bad} of {len(handles)} handles opened the right file")
        return 1 if bad else 0
    if mode == "gone":
        name = f"f{int(sys.argv[4])}"
        try:
            fd = open_handle(mount_fd, handles[name])
        except OSError as e:
            ok = e.errno == errno.ESTALE
            print(f"{name} (removed): {os.strerror(e.errno)}")
            return 0 if ok else 1
        os.close(fd)
        print(f"{name} (removed): still opened")
        return 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
