#!/usr/bin/env bash
# Latency of a `stat` loop on CPU 0 while another program on CPU 0 writes
# and fsyncs 48 MiB six times, both through one passthrough mount of a
# disk directory (timeouts 0, so every stat is a request). Through FUSE
# over io_uring both reach CPU 0's queue, which serves one request at a
# time: this shows what waits behind the fsyncs.
#
#   scripts/fsync-latency.sh [UVFS_BINARY...]   # default target/release/uvfs
#
# Give several binaries (an older build beside the current one) to compare
# them alternately; run it twice or more, the disk is noisy. Needs root
# (mount), python3 and a disk under /var/tmp. Prints one line per binary:
# samples, p50, p99 and max of the stat latency.
set -euo pipefail

bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(target/release/uvfs)
work=$(mktemp -d /var/tmp/uvfs-fsync-latency.XXXXXX)
src=$work/src
mnt=$work/mnt
cleanup() {
    umount "$mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$src" "$mnt"
echo hi > "$src/probe"

for b in "${bins[@]}"; do
    rm -f "$src/big"
    "$b" mount --source "$src" --attr-timeout 0 --entry-timeout 0 "$mnt"
    python3 - "$mnt" "$b" <<'PY'
import os, sys, threading, time
mnt, label = sys.argv[1], sys.argv[2]
os.sched_setaffinity(0, {0})

def writer():
    os.sched_setaffinity(0, {0})
    fd = os.open(mnt + "/big", os.O_WRONLY | os.O_CREAT, 0o644)
    buf = b"x" * (1 << 20)
    for _ in range(6):
        os.lseek(fd, 0, 0)
        for _ in range(48):
            os.write(fd, buf)
        os.fsync(fd)
    os.close(fd)

t = threading.Thread(target=writer)
t.start()
lat = []
while t.is_alive():
    a = time.perf_counter()
    os.stat(mnt + "/probe")
    lat.append(time.perf_counter() - a)
    time.sleep(0.001)
t.join()
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
print(f"{label}: n={len(lat)} p50={q(.5):.3f} ms p99={q(.99):.2f} ms max={lat[-1]*1e3:.1f} ms")
PY
    umount "$mnt"
done
