#!/bin/bash
# Requests a warm walk costs on a read-only passthrough against a
# read-write one (README, `--read-only`): a tree of DIRS x FILES files, one
# cold `du`, then three warm ones, counting the server's requests during the
# warm ones. The kernel invalidates a directory's atime after listing it on
# read-write mounts only, so each warm walk of a read-write mount asks one
# GETATTR per directory. Root, /dev/fuse. Usage: ro-warm-walk.sh [UVFS]
set -euo pipefail
UVFS=${1:-target/release/uvfs}
DIRS=${DIRS:-200}
FILES=${FILES:-100}
work=$(mktemp -d /var/tmp/uvfs-ro-walk.XXXXXX)
cleanup() {
    for m in ro rw; do umount "$work/$m" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/src" "$work/ro" "$work/rw"
python3 - "$work/src" "$DIRS" "$FILES" <<'PY'
import os, sys
root, dirs, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for d in range(dirs):
    p = os.path.join(root, "d%d" % d)
    os.mkdir(p)
    for f in range(files):
        open(os.path.join(p, "f%d" % f), "w").close()
PY
requests() {
    "$UVFS" stat --json "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['counters']['fuse.requests'])"
}
for m in ro rw; do
    flag=""
    [ "$m" = ro ] && flag="--read-only"
    "$UVFS" mount $flag --attr-timeout 60 --entry-timeout 60 --source "$work/src" "$work/$m"
    du -s "$work/$m" > /dev/null
    before=$(requests "$work/$m")
    for _ in 1 2 3; do du -s "$work/$m" > /dev/null; done
    after=$(requests "$work/$m")
    echo "$m: $((after - before)) requests in three warm walks of $((DIRS * FILES + DIRS + 1)) entries"
done
