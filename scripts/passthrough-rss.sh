#!/usr/bin/env bash
# Server memory per cached node of a passthrough mount, beside the peers
# fuse-backend-rs with file handles and go-fuse's loopback (fuse-backend-rs
# without file handles keeps an fd per node: no tree larger than the fd
# limit fits it)
# (issue 24's target: <= 200 bytes per node, half of fuse-backend-rs's).
#
#   scripts/passthrough-rss.sh [FILES]      # default 1000000
#   NO_PEERS=1 scripts/passthrough-rss.sh   # uvfs only
#
# Builds a tree of FILES empty files (1000 per directory) on a tmpfs under
# /dev/shm, mounts it with `uvfs mount --source` and a vnode limit above the
# tree (so nothing is recycled and the kernel keeps every node), walks it
# with `find`, and prints the server's RSS growth divided by the nodes the
# kernel then holds (files, directories and the root). Then the same for
# each peer at the same timeouts. Needs root and /dev/fuse; removes
# everything it made.
set -euo pipefail
FILES=${1:-1000000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
UVFS=$CARGO_TARGET_DIR/release/uvfs
[ -x "$UVFS" ] || cargo build --release -q -p uvfs-cli --manifest-path "$ROOT/Cargo.toml"
SRC=$(mktemp -d /dev/shm/uvfs-rss-src.XXXXXX)
MNT=$(mktemp -d /tmp/uvfs-rss-mnt.XXXXXX)
cleanup() { umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true; rm -rf "$SRC"; rmdir "$MNT" 2>/dev/null || true; }
trap cleanup EXIT
python3 - "$SRC" "$FILES" <<'PY'
import os, sys
src, n = sys.argv[1], int(sys.argv[2])
per = 1000
for d in range((n + per - 1) // per):
    dp = os.path.join(src, "d%d" % d)
    os.mkdir(dp)
    for f in range(min(per, n - d * per)):
        os.close(os.open(os.path.join(dp, "f%d" % f), os.O_CREAT | os.O_WRONLY, 0o644))
PY
NODES=$(( FILES + (FILES + 999) / 1000 + 1 ))   # files, directories, root
rss() { awk '/^VmRSS/ {print $2 * 1024}' "/proc/$1/status"; }
# Prints "name bytes-per-node" for a server whose pid is $2, mounted on $MNT.
walk() {
    local name=$1 pid=$2 before after seen
    before=$(rss "$pid")
    seen=$( { find "$MNT" -type f -printf "%s\n" 2>/dev/null || true; } | wc -l)
    after=$(rss "$pid")
    [ "$seen" -eq "$FILES" ] || echo "$name: saw $seen files of $FILES" >&2
    awk -v n="$name" -v b="$before" -v a="$after" -v k="$NODES" 'BEGIN {
        printf "%-22s %6.1f MiB -> %6.1f MiB  %5.0f bytes per node\n", n, b / 2^20, a / 2^20, (a - b) / k }'
}
# Waits for a peer's mount to come up.
wait_mount() {
    for _ in $(seq 150); do mountpoint -q "$MNT" && return 0; sleep 0.1; done
    echo "$1 did not mount" >&2
    return 1
}

echo "server                 RSS before -> after the walk of $FILES files ($NODES nodes)"
"$UVFS" mount --source "$SRC" --vnodes $((FILES * 3)) --entry-timeout 3600 --attr-timeout 3600 "$MNT"
pid=$("$UVFS" stat --json "$MNT" | python3 -c "import json,sys; print(json.load(sys.stdin)['pid'])")
walk uvfs "$pid"
vn=$("$UVFS" stat --json "$MNT" | python3 -c "
import json, sys
def find(o):
    if isinstance(o, dict):
        for k, v in o.items():
            if k.endswith('numvnodes'):
                return v
            r = find(v)
            if r is not None:
                return r
print(find(json.load(sys.stdin)) or 0)")
[ "$vn" -ge "$NODES" ] || echo "uvfs: $vn vnodes cached, fewer than $NODES nodes (recycled?)" >&2
umount "$MNT"

# Peers (scripts/build-peers.sh builds them; skipped if they cannot be).
PEERS=$CARGO_TARGET_DIR/peers
[ -n "${NO_PEERS:-}" ] && exit 0
bash "$ROOT/scripts/build-peers.sh" fbr-passthrough gofuse-loopback >/dev/null 2>&1 || true
peer() {
    local name=$1
    shift
    [ -x "$1" ] || { echo "$name: not built (scripts/build-peers.sh)"; return 0; }
    "$@" >/dev/null 2>&1 &
    local pid=$!
    if wait_mount "$name"; then
        walk "$name" "$pid"
    fi
    umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
peer fuse-backend-rs-fh "$PEERS/fbr-passthrough" "$SRC" "$MNT" --timeout 3600 --file-handles
peer go-fuse-loopback "$PEERS/gofuse-loopback" -entry-timeout 3600 -attr-timeout 3600 "$MNT" "$SRC"
