#!/usr/bin/env bash
# Server memory per cached vnode of a passthrough mount (issue 5's target:
# RSS per cached vnode <= 512 bytes at 1,000,000 cached vnodes).
#
#   scripts/passthrough-rss.sh [FILES]      # default 1000000
#
# Builds a tree of FILES empty files (1000 per directory) on a tmpfs under
# /dev/shm, mounts it with `uvfs mount --source` and a vnode limit above the
# tree (so nothing is recycled and the kernel keeps every node), walks it
# with `find`, and prints the server's RSS growth divided by the vnodes it
# then holds. Needs root and /dev/fuse; removes everything it made.
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
"$UVFS" mount --source "$SRC" --vnodes $((FILES * 3)) --entry-timeout 3600 --attr-timeout 3600 "$MNT"
pid=$("$UVFS" stat --json "$MNT" | python3 -c "import json,sys; print(json.load(sys.stdin)['pid'])")
rss() { awk '/^VmRSS/ {print $2 * 1024}' "/proc/$pid/status"; }
before=$(rss)
seen=$(find "$MNT" -type f -printf "%s\n" | wc -l)
after=$(rss)
"$UVFS" stat --json "$MNT" > "$MNT.stat.json"
python3 - "$MNT.stat.json" "$before" "$after" "$seen" "$FILES" <<'PY'
import json, sys
stat = json.load(open(sys.argv[1]))
before, after, seen, files = map(int, sys.argv[2:6])
flat = {}
def walk(o, p=""):
    if isinstance(o, dict):
        for k, v in o.items():
            walk(v, p + "." + k if p else k)
    else:
        flat[p] = o
walk(stat.get("counters", stat))
vn = next((v for k, v in flat.items() if k.endswith("vnode.numvnodes") or k.endswith("numvnodes")), None)
print(f"files seen: {seen} of {files}")
print(f"server RSS: {before/2**20:.1f} MiB before the walk, {after/2**20:.1f} MiB after")
if vn:
    print(f"vnodes cached: {vn}")
    print(f"RSS growth per cached vnode: {(after - before) / vn:.0f} bytes (target <= 512)")
PY
rm -f "$MNT.stat.json"
