#!/usr/bin/env bash
# What opening and closing cached files costs on a memfs mount: an
# open+read+close loop over 200 small files, and `grep -r` over 2,000
# small files, both warm (every page already in the kernel's cache), so
# what is left is the requests each open and close sends the server.
#
#   scripts/close-cost.sh [--source] [UVFS_COMMAND...]   # default target/release/uvfs
#
# Give several commands (an older build beside the current one, or a
# binary with extra `uvfs mount` options in one quoted word:
# "target/release/uvfs --server-io") to compare them alternately, ROUNDS
# times each (default 6). With --source each mount is a passthrough of a
# fresh directory under /var/tmp instead of a memfs. Needs root (mount)
# and python3. Prints one line per run, then per command the median over
# runs: microseconds per open+read+close (itself a median of 5 passes)
# and milliseconds per `grep -r` (median of 5).
set -euo pipefail

source=""
if [ "${1:-}" = --source ]; then
    source=$(mktemp -d /var/tmp/uvfs-close-cost-src.XXXXXX)
    shift
fi
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(target/release/uvfs)
rounds=${ROUNDS:-6}
mnt=$(mktemp -d /tmp/uvfs-close-cost.XXXXXX)
out=$(mktemp)
cleanup() {
    umount "$mnt" 2>/dev/null || true
    rmdir "$mnt" 2>/dev/null || true
    rm -f "$out"
    [ -z "$source" ] || rm -rf "$source"
}
trap cleanup EXIT

for _ in $(seq "$rounds"); do
    for b in "${bins[@]}"; do
        read -r -a cmd <<<"$b"
        if [ -n "$source" ]; then
            find "$source" -mindepth 1 -delete
            "${cmd[0]}" mount --source "$source" "${cmd[@]:1}" "$mnt"
        else
            "${cmd[0]}" mount "${cmd[@]:1}" "$mnt"
        fi
        python3 - "$mnt" "${b// /_}" <<'PY' | tee -a "$out"
import os, statistics, subprocess, sys, time
mnt, label = sys.argv[1], sys.argv[2]
os.mkdir(f"{mnt}/o")
for i in range(200):
    with open(f"{mnt}/o/r{i}", "w") as f:
        f.write("x" * 100)
for d in range(20):
    os.mkdir(f"{mnt}/t{d}")
    for i in range(100):
        with open(f"{mnt}/t{d}/{i}", "w") as f:
            f.write(f"line {d} {i}\n")

def loop(n=5000):
    a = time.perf_counter()
    for k in range(n):
        fd = os.open(f"{mnt}/o/r{k % 200}", os.O_RDONLY)
        os.read(fd, 4096)
        os.close(fd)
    return (time.perf_counter() - a) / n * 1e6

def grep():
    a = time.perf_counter()
    subprocess.run(["grep", "-r", "zzz", mnt], stdout=subprocess.DEVNULL)
    return (time.perf_counter() - a) * 1e3

loop(200), grep()
o = statistics.median(loop() for _ in range(5))
g = statistics.median(grep() for _ in range(5))
print(f"{label} {o:.1f} {g:.1f}")
PY
        umount "$mnt"
    done
done
echo "median over $rounds runs: command, us per open+read+close, ms per grep -r"
labels=()
for b in "${bins[@]}"; do labels+=("${b// /_}"); done
python3 - "$out" "${labels[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for b in sys.argv[2:]:
    o = [float(r[1]) for r in rows if r[0] == b]
    g = [float(r[2]) for r in rows if r[0] == b]
    print(f"{b} {statistics.median(o):.1f} {statistics.median(g):.1f}")
PY
