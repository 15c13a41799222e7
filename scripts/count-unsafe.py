#!/usr/bin/env python3
"""Counts `unsafe {` blocks in product code, per crate.

Product code: every crates/*/src but the benchmarks' (bench, freebsd),
and third_party/fuser/src. Left out: test code (`#[cfg(test)]` modules,
inline or in files of their own), comments and strings (as
check-module-cycles.py reads code), and fuser's mount back ends for
libfuse 2 and 3, which uvfs never builds (it mounts with fuser's
pure-Rust `fuser_mount_impl`).

Usage: scripts/count-unsafe.py [--max N]   (exit 1 when the total is over N)
"""

import argparse
import glob
import importlib.util
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "cycles", os.path.join(ROOT, "scripts", "check-module-cycles.py"))
cycles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cycles)

NOT_PRODUCT_CRATES = ("bench", "freebsd")
# Modules compiled only for a fuser mount implementation uvfs does not use.
OTHER_MOUNT_IMPL = re.compile(
    r'#\[cfg\(fuser_mount_impl\s*=\s*"libfuse[23]"\)\]\s*mod\s+(\w+)\s*;')


def unbuilt(modules):
    """Modules declared only for the libfuse mount implementations."""
    out = set()
    for here, f in modules.items():
        with open(f, encoding="utf-8") as fh:
            code = fh.read()  # raw: the cfg's value is a string literal
        out.update(here + (m.group(1),) for m in OTHER_MOUNT_IMPL.finditer(code))
    return out


def count(src):
    modules = cycles.module_files(src)
    skip = cycles.test_file_modules(modules) | unbuilt(modules)
    n = 0
    for here, f in modules.items():
        if any(here[:len(s)] == s for s in skip):
            continue
        with open(f, encoding="utf-8") as fh:
            code = cycles.strip_test_modules(cycles.strip_code(fh.read()))
        n += len(re.findall(r"\bunsafe\s*\{", code))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max", type=int, help="fail when the total is over this")
    a = ap.parse_args()
    srcs = sorted(d for d in glob.glob(os.path.join(ROOT, "crates", "*", "src"))
                  if os.path.basename(os.path.dirname(d)) not in NOT_PRODUCT_CRATES)
    srcs.append(os.path.join(ROOT, "third_party", "fuser", "src"))
    total = 0
    for s in srcs:
        n = count(s)
        total += n
        print(f"{n:4}  {os.path.relpath(os.path.dirname(s), ROOT)}")
    print(f"{total:4}  total")
    if a.max is not None and total > a.max:
        print(f"count-unsafe: {total} unsafe blocks, over {a.max}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
