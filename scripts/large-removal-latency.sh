#!/bin/bash
# How long other requests wait while a uvfs mount ends a large file's
# storage (README, "Ending a large file's storage"): a SIZE_MIB file is
# written through the mount, then removed (rm), truncated (truncate -s 0),
# replaced (mv over it) or truncated by an O_TRUNC open, from CPU 0, while
# a second process on CPU 0 stats a file and lists its directory every
# millisecond (timeouts 0: each is a request). Through FUSE over io_uring
# both reach CPU 0's queue. Prints the worst wait of the stat loop for
# each change, with the stat file in another directory and in the same one
# (an UNLINK in flight keeps its directory locked in the kernel). FS=
# passthrough (of a directory in /var/tmp, the default) or memfs. With
# `native` for UVFS, the same on the source directory itself, or on a
# tmpfs directory for memfs (what the kernel's own file system costs).
# DROP=1 drops the kernel's clean caches after writing the file, so that
# the change costs only what the file system does (through FUSE, the
# kernel otherwise evicts the file's cached pages itself, in the caller's
# context on CPU 0: ~90 ms for 2 GiB of a memfs file). Root, /dev/fuse.
# Usage: [FS=memfs] [DROP=1] large-removal-latency.sh [UVFS|native]
set -euo pipefail
UVFS=${1:-target/release/uvfs}
SIZE_MIB=${SIZE_MIB:-2048}
FS=${FS:-passthrough}
case $FS in
passthrough) work=$(mktemp -d /var/tmp/uvfs-rmlat.XXXXXX) ;;
memfs) work=$(mktemp -d /dev/shm/uvfs-rmlat.XXXXXX) ;;
*)
    echo "FS must be passthrough or memfs" >&2
    exit 2
    ;;
esac
cleanup() {
    umount "$work/mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/src" "$work/mnt"
if [ "$UVFS" = native ]; then
    m=$work/src
else
    # Timeouts 0: every stat and listing of the loop is a request.
    src=()
    if [ "$FS" = passthrough ]; then src=(--source "$work/src"); fi
    "$UVFS" mount "${src[@]}" --entry-timeout 0 --attr-timeout 0 "$work/mnt"
    m=$work/mnt
fi
mkdir -p "$m/other"
touch "$m/near" "$m/other/far"
transport() {
    if [ "$UVFS" = native ]; then
        echo "no FUSE"
        return
    fi
    "$UVFS" stat --json "$m" | python3 -c "import json,sys; c=json.load(sys.stdin)['counters']; print('io_uring' if c.get('fuse.uring', 0) else '/dev/fuse')"
}

# Worst wait of a stat+listdir loop pinned to CPU 0 while "$@" runs there.
worst_wait() {
    local probe=$1
    shift
    python3 - "$probe" "$@" <<'PY'
import os, subprocess, sys, threading, time
probe, cmd = sys.argv[1], sys.argv[2:]
os.sched_setaffinity(0, {0})
stop, worst = False, 0.0
def loop():
    global worst
    while not stop:
        t = time.perf_counter()
        os.stat(probe)
        os.listdir(os.path.dirname(probe))
        worst = max(worst, time.perf_counter() - t)
        time.sleep(0.001)
th = threading.Thread(target=loop)
th.start()
time.sleep(0.5)
subprocess.run(["taskset", "-c", "0"] + cmd, check=True)
time.sleep(0.5)
stop = True
th.join()
print(f"{worst * 1000:.1f}")
PY
}

big() {
    dd if=/dev/zero of="$m/big" bs=1M count="$SIZE_MIB" status=none
    sync
    if [ -n "${DROP:-}" ]; then echo 1 >/proc/sys/vm/drop_caches; fi
}

echo "# $FS, $SIZE_MIB MiB file, $(transport)${DROP:+, caches dropped}; worst wait of a stat+readdir on the same CPU (ms)"
printf '%-22s %12s %12s\n' change "other dir" "same dir"
for change in rm truncate mv-over o_trunc; do
    row=()
    for probe in "$m/other/far" "$m/near"; do
        big
        case $change in
        rm) row+=("$(worst_wait "$probe" rm "$m/big")") ;;
        truncate) row+=("$(worst_wait "$probe" truncate -s 0 "$m/big")") ;;
        mv-over)
            echo new >"$m/new"
            sync
            row+=("$(worst_wait "$probe" mv "$m/new" "$m/big")")
            ;;
        o_trunc) row+=("$(worst_wait "$probe" dd if=/dev/null of="$m/big" status=none)") ;;
        esac
        rm -f "$m/big"
    done
    printf '%-22s %12s %12s\n' "$change" "${row[0]}" "${row[1]}"
done
if [ "$UVFS" != native ]; then
    "$UVFS" stat "$m" | grep -E "offloaded|closes.deferred|reaped" || true
fi
