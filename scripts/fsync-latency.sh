#!/usr/bin/env bash
# Latency of a `stat` loop on CPU 0 while another program on CPU 0 writes
# and fsyncs 48 MiB six times, both through one passthrough mount of a
# disk directory (timeouts 0, so every stat is a request). Through FUSE
# over io_uring both reach CPU 0's queue, which serves one request at a
# time: this shows what waits behind the fsyncs.
#
#   scripts/fsync-latency.sh [--throttled] [UVFS_BINARY...]
#                                  # default target/release/uvfs
#
# --throttled: the writer writes 768 MiB once and never syncs, with the
# machine's dirty-page limit lowered to 32 MiB (vm.dirty_bytes, restored
# on exit) so the kernel throttles it: what waits behind writes that sleep
# in balance_dirty_pages.
#
# Give several binaries (an older build beside the current one) to compare
# them alternately; run it twice or more, the disk is noisy. Needs root
# (mount), python3 and a disk under /var/tmp. Prints one line per binary:
# samples, p50, p99 and max of the stat latency.
set -euo pipefail

throttled=0
if [ "${1:-}" = --throttled ]; then
    throttled=1
    shift
fi
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(target/release/uvfs)
work=$(mktemp -d /var/tmp/uvfs-fsync-latency.XXXXXX)
src=$work/src
mnt=$work/mnt
dirty=$(cat /proc/sys/vm/dirty_bytes /proc/sys/vm/dirty_ratio \
    /proc/sys/vm/dirty_background_bytes /proc/sys/vm/dirty_background_ratio)
restore_dirty() {
    # Writing a *_bytes value clears its *_ratio twin and the reverse:
    # restore whichever was in force.
    set -- $dirty
    if [ "$1" != 0 ]; then echo "$1" > /proc/sys/vm/dirty_bytes; else echo "$2" > /proc/sys/vm/dirty_ratio; fi
    if [ "$3" != 0 ]; then echo "$3" > /proc/sys/vm/dirty_background_bytes; else echo "$4" > /proc/sys/vm/dirty_background_ratio; fi
}
cleanup() {
    umount "$mnt" 2>/dev/null || true
    rm -rf "$work"
    [ "$throttled" = 0 ] || restore_dirty
}
trap cleanup EXIT
mkdir -p "$src" "$mnt"
echo hi > "$src/probe"
if [ "$throttled" = 1 ]; then
    echo $((16 << 20)) > /proc/sys/vm/dirty_background_bytes
    echo $((32 << 20)) > /proc/sys/vm/dirty_bytes
fi

for b in "${bins[@]}"; do
    rm -f "$src/big"
    "$b" mount --source "$src" --attr-timeout 0 --entry-timeout 0 "$mnt"
    python3 - "$mnt" "$b" "$throttled" <<'PY'
import os, sys, threading, time
mnt, label, throttled = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
os.sched_setaffinity(0, {0})

def writer():
    os.sched_setaffinity(0, {0})
    fd = os.open(mnt + "/big", os.O_WRONLY | os.O_CREAT, 0o644)
    buf = b"x" * (1 << 20)
    if throttled:
        for _ in range(768):
            os.write(fd, buf)
        os.close(fd)
        return
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
    sync
done
