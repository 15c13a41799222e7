#!/usr/bin/env bash
# Cold walks of a passthrough mount, two uvfs binaries side by side (issue
# 24's "cold walks no slower than today, 1 walker and 2"): `uvfs bench
# fuse-stat` mounts with the binary that runs it, so comparing two builds
# needs each mounted by hand.
#
#   scripts/cold-walk-sidebyside.sh OLD_UVFS NEW_UVFS
#   FILES=200000 REPEATS=5 (the defaults)  OUT=DIR keeps each walk's `uvfs stat --json`
#   WALKERS="1 2" (the default; "1" for one-walker rounds only, as a
#   bisection wants)  NATIVE=0 leaves the source's own walks out
#
# The tree: two subtrees t0 and t1 under the source (/var/tmp, ext4 here),
# each FILES/2 empty files, 100 to a directory (2,000 directories at
# 200,000 files). Each mount is `uvfs mount --source SRC MNT` with nothing
# else (the options a user types). For each of REPEATS rounds, in an order
# of old, new, native in odd rounds and native, new, old in even ones (the source
# itself) gets: a fresh mount, `sync; echo 3 > /proc/sys/vm/drop_caches`,
# then a timed `find MNT -type f -size -1k` (1 walker); unmount, and the
# same again with 2 walkers, one `find` per subtree at once. Stats/s is
# the entries walked (files and directories, as fuse-stat counts them)
# over the wall time; the CPU per stat of the server (its /proc stat) and
# of the walkers (`time`) is less at the mercy of other load than the
# rate. Prints every walk, then the medians and new/old
# (ratio of the medians, and median of the rounds' ratios).
# Needs root and /dev/fuse; everything made is removed.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 OLD_UVFS NEW_UVFS" >&2
    exit 2
fi
declare -A BIN=([old]=$1 [new]=$2)
FILES=${FILES:-200000}
REPEATS=${REPEATS:-5}
WALKERS=${WALKERS:-1 2}
NATIVE=${NATIVE:-1}
OUT=${OUT:-}
W=$(mktemp -d /var/tmp/uvfs-cold-sbs.XXXXXX)
mkdir "$W/src" "$W/mnt-old" "$W/mnt-new"
[ -n "$OUT" ] && mkdir -p "$OUT"

unmount() {
    local m=$1
    mountpoint -q "$m" || return 0
    umount "$m" 2>/dev/null || umount -l "$m"
    # Let the server (and its supervisor) exit before the next walk starts.
    for _ in $(seq 1 100); do
        pgrep -f -- "$m" >/dev/null || break
        sleep 0.1
    done
}
cleanup() {
    unmount "$W/mnt-old" || true
    unmount "$W/mnt-new" || true
    rm -rf "$W"
}
trap cleanup EXIT

python3 - "$W/src" "$FILES" <<'PY'
import os, sys
base, n = sys.argv[1], int(sys.argv[2])
per = 100
for s in range(2):
    files = n // 2 + (s < n % 2)
    t = f"{base}/t{s}"
    os.mkdir(t)
    for d in range((files + per - 1) // per):
        p = f"{t}/d{d}"
        os.mkdir(p)
        for f in range(min(per, files - d * per)):
            open(f"{p}/f{f}", "wb").close()
PY
entries=$(find "$W/src" -mindepth 2 | wc -l)
sync

# cpu_ticks PID: user + system CPU of a process so far, in clock ticks (0
# for no process).
cpu_ticks() {
    if [ -z "$1" ]; then echo 0; return; fi
    awk '{print $14 + $15}' "/proc/$1/stat"
}

# timed_walk DIR THREADS [SERVER_PID]: "wall walkers_cpu server_cpu", in
# seconds, of a cold walk of DIR.
timed_walk() {
    local dir=$1 threads=$2 pid=${3:-} c0 c1 t
    sync
    echo 3 >/proc/sys/vm/drop_caches
    c0=$(cpu_ticks "$pid")
    t=$({
        TIMEFORMAT='%3R %3U %3S'
        time (
            if [ "$threads" = 1 ]; then
                find "$dir" -type f -size -1k | wc -l >/dev/null
            else
                find "$dir/t0" -type f -size -1k | wc -l >/dev/null &
                find "$dir/t1" -type f -size -1k | wc -l >/dev/null &
                wait
            fi
        )
    } 2>&1)
    c1=$(cpu_ticks "$pid")
    read -r wall usr sys <<<"$t"
    echo "$wall $(echo "$usr + $sys" | bc) $(echo "scale=3; ($c1 - $c0) / $(getconf CLK_TCK)" | bc)"
}

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

declare -A rate ratio scpu wcpu
configs=(old new)
[ "$NATIVE" = 0 ] || configs+=(native)
for r in $(seq 1 "$REPEATS"); do
    # old and new next to each other, each first in every other round.
    if [ $((r % 2)) = 1 ]; then order=("${configs[@]}"); else order=("${configs[@]}") && order=("${order[@]:2}" new old); fi
    declare -A this=()
    for c in "${order[@]}"; do
        for t in $WALKERS; do
            if [ "$c" = native ]; then
                read -r s wc sc <<<"$(timed_walk "$W/src" "$t")"
            else
                m=$W/mnt-$c
                "${BIN[$c]}" mount --source "$W/src" "$m"
                pid=$(pgrep -f -- "$m" | head -n 1)
                read -r s wc sc <<<"$(timed_walk "$m" "$t" "$pid")"
                if [ -n "$OUT" ]; then
                    "${BIN[$c]}" stat --json "$m" >"$OUT/r$r-$c-T$t.json" 2>/dev/null || true
                fi
                unmount "$m"
            fi
            v=$(echo "scale=1; $entries / $s" | bc)
            scpu[$c,$t]+="$(echo "scale=3; $sc * 1000000 / $entries" | bc) "
            wcpu[$c,$t]+="$(echo "scale=3; $wc * 1000000 / $entries" | bc) "
            rate[$c,$t]+="$v "
            this[$c,$t]=$v
            printf 'round %d %-6s T=%d: %.3f s, %.0f stats/s, CPU per stat: server %.2f us, walkers %.2f us (load %s)\n' \
                "$r" "$c" "$t" "$s" "$v" "$(echo "scale=3; $sc * 1000000 / $entries" | bc)" \
                "$(echo "scale=3; $wc * 1000000 / $entries" | bc)" "$(cut -d' ' -f1 /proc/loadavg)"
        done
    done
    for t in $WALKERS; do
        ratio[$t]+="$(echo "scale=4; ${this[new,$t]} / ${this[old,$t]}" | bc) "
    done
done

echo "cold walks of $entries entries ($FILES files), medians of $REPEATS:"
for t in $WALKERS; do
    for c in "${configs[@]}"; do
        printf '  T=%d %-6s %8.0f stats/s, CPU per stat: server %.2f us, walkers %.2f us\n' "$t" "$c" \
            "$(echo "${rate[$c,$t]}" | median)" "$(echo "${scpu[$c,$t]}" | median)" "$(echo "${wcpu[$c,$t]}" | median)"
    done
    o=$(echo "${rate[old,$t]}" | median)
    n=$(echo "${rate[new,$t]}" | median)
    printf '  T=%d new/old %.3f (median of the rounds'"'"' ratios %.3f; rounds: %s)\n' "$t" \
        "$(echo "scale=4; $n / $o" | bc)" "$(echo "${ratio[$t]}" | median)" "${ratio[$t]}"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
