#!/usr/bin/env bash
# What the host-change watcher costs per event about files the kernel does
# not hold: a default passthrough mount of a fresh ext4 directory, then
# FILES empty files made on the host side in directories the mount has
# never seen (`tar -x`'s pattern: create, write, close), while nothing
# reads the mount. Prints the events read and the CPU of the server's
# watcher thread and of the whole server, per event.
#
#   scripts/watch-cost.sh [UVFS_BINARY]      (FILES=100000 by default)
set -euo pipefail
UVFS=${1:-target/release/uvfs}
FILES=${FILES:-100000}
W=$(mktemp -d /var/tmp/uvfs-watch-cost.XXXXXX)
mkdir "$W/src" "$W/mnt"
trap 'umount "$W/mnt" 2>/dev/null; rm -rf "$W"' EXIT
"$UVFS" mount --source "$W/src" "$W/mnt"
ls "$W/mnt" > /dev/null
stat_json() { "$UVFS" stat --json "$W/mnt"; }
PID=$(stat_json | python3 -c "import json,sys; print(json.load(sys.stdin)['pid'])")
cpu() { # cpu THREAD_NAME_PREFIX|'': summed run time (ns) of matching threads
    local sum=0 t
    for t in /proc/"$PID"/task/*; do
        if [ -z "$1" ] || grep -q "^$1" "$t/comm"; then
            sum=$((sum + $(cut -d' ' -f1 "$t/schedstat")))
        fi
    done
    echo "$sum"
}
events() { stat_json | python3 -c "import json,sys; print(json.load(sys.stdin)['counters']['passthrough.watch.events'])"; }
e0=$(events); w0=$(cpu uvfs-watch); a0=$(cpu "")
python3 - "$W/src" "$FILES" <<'PY'
import os, sys
base, n = sys.argv[1], int(sys.argv[2])
per = 1000
for d in range((n + per - 1) // per):
    p = f"{base}/h{d}"
    os.mkdir(p)
    for f in range(min(per, n - d * per)):
        with open(f"{p}/f{f}", "w"):
            pass
PY
sleep 1
e1=$(events); w1=$(cpu uvfs-watch); a1=$(cpu "")
n=$((e1 - e0))
echo "watch-cost: $FILES files made on the host: $n events read (the file system's, all processes')"
echo "watch-cost: watcher thread $(( (w1 - w0) / 1000000 )) ms CPU, $(( (w1 - w0) / (n > 0 ? n : 1) )) ns per event"
echo "watch-cost: whole server  $(( (a1 - a0) / 1000000 )) ms CPU, $(( (a1 - a0) / (n > 0 ? n : 1) )) ns per event"
