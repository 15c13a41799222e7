#!/usr/bin/env bash
# `rm -rf` through a default passthrough of an ext4 directory, builds
# alternated: each round unpacks a copy of /usr/include through a fresh
# mount of each build (a new source directory under /var/tmp), waits 2 s,
# and times `rm -rf` of it.
#
#   scripts/rmrf-ab.sh [UVFS_COMMAND...]   # default target/release/uvfs
#
# ROUNDS (default 8) rounds; SYNC=1 syncs after the unpack, so that each
# free waits for the disk (on a disk mounted `discard`, for its discard).
# Needs root (mount), tar, gzip and awk. Prints one line per run, then per
# command the median seconds and the native `rm -rf` of the same tree
# (unpacked on the same disk, timed the same way, once per round).
set -euo pipefail

bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(target/release/uvfs)
rounds=${ROUNDS:-8}
work=$(mktemp -d /var/tmp/uvfs-rmrf-ab.XXXXXX)
mnt=$(mktemp -d /tmp/uvfs-rmrf-ab.XXXXXX)
out=$(mktemp)
cleanup() {
    umount "$mnt" 2>/dev/null || true
    rmdir "$mnt" 2>/dev/null || true
    rm -rf "$work" "$out"
}
trap cleanup EXIT
tar czf "$work/tree.tgz" -C /usr include

now() { date +%s.%N; }

# Unpacks into $1, then times `rm -rf $1/include`.
timed_rm() {
    tar xzf "$work/tree.tgz" -C "$1"
    [ "${SYNC:-0}" = 1 ] && sync
    sleep 2
    local s e
    s=$(now)
    rm -rf "$1/include"
    e=$(now)
    awk "BEGIN { printf \"%.3f\", $e - $s }"
}

for r in $(seq "$rounds"); do
    for i in "${!bins[@]}"; do
        rm -rf "$work/src"
        mkdir "$work/src"
        # shellcheck disable=SC2086 # a command may carry options
        ${bins[$i]} mount --source "$work/src" "$mnt"
        t=$(timed_rm "$mnt")
        ${bins[$i]%% *} umount "$mnt"
        echo "round $r ${bins[$i]}: $t s" | tee -a /dev/stderr | sed "s/^/$i /" >>"$out"
    done
    rm -rf "$work/src"
    mkdir "$work/src"
    t=$(timed_rm "$work/src")
    echo "round $r native: $t s" | tee -a /dev/stderr | sed "s/^/native /" >>"$out"
done

median() { sort -g | awk '{v[NR]=$1} END{print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
for i in "${!bins[@]}"; do
    echo "${bins[$i]}: median $(grep "^$i " "$out" | awk '{print $(NF-1)}' | median) s"
done
echo "native: median $(grep "^native " "$out" | awk '{print $(NF-1)}' | median) s"
