#!/usr/bin/env bash
# How much the host-change watcher slows a warm walk of a passthrough
# mount while the host unpacks a tarball into the source, outside what
# the mount has seen (issue 24's target: <= 10%).
#
#   scripts/watch-walk-slowdown.sh [UVFS_BINARY]
#   WALK_FILES=200000 TAR_FILES=100000 REPEATS=5 (the defaults)
#
# The unpack itself takes CPU and disk from the walk whatever the server
# does, so the watcher's share is found by comparison with a mount that
# caches names and attributes as long but runs no watcher
# (`--no-watch --entry-timeout 86400 --attr-timeout 86400`): the same
# warm walk, sending no request either way. For each of REPEATS rounds,
# each mount in turn (one at a time: the watcher's mark covers the whole
# file system, so a second mount's unpack would reach it too): mount,
# warm the kernel with two walks, time walks alone, then time walks while
# `tar -x` of TAR_FILES files runs into a fresh directory of the source,
# then unmount and remove the unpacked files. Each round gives a mount's
# slowdown (median walk under the unpack over median walk alone, both in
# that round); the watcher's share is the ratio of the two mounts'
# median slowdowns. A watcher whose queue overflows (the unpack outran
# it) makes the kernel look every cached name up again: each round says
# how often that happened. Needs root and /dev/fuse; the source lives
# under /var/tmp (ext4 here); everything made is removed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
UVFS=${1:-$ROOT/target/release/uvfs}
WALK_FILES=${WALK_FILES:-200000}
TAR_FILES=${TAR_FILES:-100000}
REPEATS=${REPEATS:-5}
W=$(mktemp -d /var/tmp/uvfs-watch-walk.XXXXXX)
mkdir "$W/src" "$W/mnt" "$W/tarsrc"
cleanup() { umount "$W/mnt" 2>/dev/null || umount -l "$W/mnt" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT

python3 - "$W/src/tree" "$WALK_FILES" "$W/tarsrc" "$TAR_FILES" <<'PY'
import os, sys
def tree(base, n, size):
    os.mkdir(base)
    per = 100
    for d in range((n + per - 1) // per):
        p = f"{base}/d{d}"
        os.mkdir(p)
        for f in range(min(per, n - d * per)):
            with open(f"{p}/f{f}", "wb") as fh:
                fh.write(b"x" * size)
tree(sys.argv[1], int(sys.argv[2]), 0)
tree(sys.argv[3] + "/t", int(sys.argv[4]), 512)
PY
tar -C "$W/tarsrc" -cf "$W/unpack.tar" t
rm -rf "$W/tarsrc"

# walk: one timed `find` of the tree through the mount, in seconds.
walk() {
    local t0 t1
    t0=$(date +%s%N)
    find "$W/mnt/tree" -type f -size -1k | wc -l > /dev/null
    t1=$(date +%s%N)
    echo "scale=6; ($t1 - $t0) / 1000000000" | bc
}

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
declare -A alone under slow
configs=(watch nowatch-long)
for r in $(seq 1 "$REPEATS"); do
    # Alternate which goes first, so neither always follows the other's
    # unpack and removal.
    if [ $((r % 2)) = 0 ]; then order=("${configs[1]}" "${configs[0]}"); else order=("${configs[@]}"); fi
    for c in "${order[@]}"; do
        case $c in
            watch) "$UVFS" mount --source "$W/src" "$W/mnt" ;;
            nowatch-long) "$UVFS" mount --no-watch --entry-timeout 86400 --attr-timeout 86400 \
                --source "$W/src" "$W/mnt" ;;
        esac
        walk > /dev/null; walk > /dev/null
        round_alone="" round_under=""
        for _ in 1 2 3; do t=$(walk); alone[$c]+="$t "; round_alone+="$t "; done
        sync
        tar -C "$W/src" -xf "$W/unpack.tar" --transform "s,^t,u$r$c," &
        tarpid=$!
        n=0
        while kill -0 "$tarpid" 2>/dev/null; do
            t=$(walk)
            # Only walks that ended before the unpack did ran under it.
            kill -0 "$tarpid" 2>/dev/null && { under[$c]+="$t "; round_under+="$t "; n=$((n + 1)); }
        done
        wait "$tarpid"
        lost=$("$UVFS" stat --json "$W/mnt" | python3 -c 'import json,sys; print(json.load(sys.stdin)["counters"].get("passthrough.watch.overflows", 0))')
        ra=$(echo "${round_alone:-}" | median); ru=$(echo "${round_under:-}" | median)
        slow[$c]+="$(echo "scale=4; $ru / $ra" | bc) "
        echo "round $r $c: walk alone $ra s, under the unpack $ru s ($n walks, watcher queue overflows $lost)" >&2
        round_alone="" round_under=""
        umount "$W/mnt"
        rm -rf "$W/src/u$r$c"
        sync
    done
done

for c in "${configs[@]}"; do
    a=$(echo "${alone[$c]}" | median); u=$(echo "${under[$c]}" | median)
    printf "%-13s warm walk of %d files: alone %.3f s, under a tar -x of %d files %.3f s (%d walks)\n" \
        "$c" "$WALK_FILES" "$a" "$TAR_FILES" "$u" "$(echo "${under[$c]}" | wc -w)"
done
sw=$(echo "${slow[watch]}" | median); sn=$(echo "${slow[nowatch-long]}" | median)
echo "slowdown under the unpack (median of the rounds' under/alone): watch ${sw}x, nowatch-long ${sn}x"
echo "watcher's share: $(echo "scale=3; $sw / $sn" | bc)x (target <= 1.10)"
