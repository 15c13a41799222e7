#!/usr/bin/env bash
# Seconds `cp` takes to copy a 1 GiB file within one memfs mount, for each
# given uvfs binary, beside tmpfs, alternated (repeat r of every mount,
# then repeat r+1). `cp` copies with copy_file_range: a server that answers
# it copies in its own memory; one that does not leaves the kernel to copy
# through its page cache, a READ and a WRITE round trip per chunk.
#
#   scripts/cp-memfs.sh [--idle] [--repeats N] [UVFS_BINARY...]
#                                  # default target/release/uvfs
#
# --idle: sleep 5 s before each copy, so the server has given the memory
# of the last copy back to the system (crates/fuse/src/release.rs) and
# faults in fresh memory, as after any pause.
#
# Needs root (mount). Prints one line per mount: the median and every
# repeat, in seconds. Each mount's copy is checked with cmp once, after the
# timed ones.
set -euo pipefail

idle=0
repeats=5
while [ $# -gt 0 ]; do
    case "$1" in
    --idle) idle=1; shift ;;
    --repeats) repeats=$2; shift 2 ;;
    *) break ;;
    esac
done
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(target/release/uvfs)
work=$(mktemp -d /tmp/uvfs-cp-memfs.XXXXXX)
shm=$(mktemp -d /dev/shm/uvfs-cp-memfs.XXXXXX)
mounts=()
cleanup() {
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    rm -rf "$work" "$shm"
}
trap cleanup EXIT
dirs=()
for i in "${!bins[@]}"; do
    m=$work/m$i
    mkdir -p "$m"
    "${bins[$i]}" mount "$m"
    mounts+=("$m")
    dirs+=("$m")
done
dirs+=("$shm")
for d in "${dirs[@]}"; do
    dd if=/dev/urandom of="$d/big" bs=1M count=1024 status=none
done
declare -A times
for _ in $(seq "$repeats"); do
    for d in "${dirs[@]}"; do
        [ "$idle" = 1 ] && sleep 5
        s=$(date +%s.%N)
        cp "$d/big" "$d/copy"
        e=$(date +%s.%N)
        rm "$d/copy"
        times[$d]+="$(echo "$e - $s" | bc) "
    done
done
# Checked once per mount, after the timed copies: a check after each
# would read 2 GiB between copies and change what the next one finds.
for d in "${dirs[@]}"; do
    cp "$d/big" "$d/copy"
    cmp -s "$d/big" "$d/copy" || { echo "copy differs in $d" >&2; exit 1; }
    rm "$d/copy"
done
for i in "${!dirs[@]}"; do
    name=tmpfs
    [ "$i" -lt ${#bins[@]} ] && name="memfs (${bins[$i]})"
    python3 -c 'import statistics, sys
t = [float(x) for x in sys.argv[2].split()]
each = " ".join("%.2f" % x for x in t)
print("%s: median %.2f s  [%s]" % (sys.argv[1], statistics.median(t), each))' \
        "$name" "${times[${dirs[$i]}]}"
done
