#!/usr/bin/env bash
# Passthrough conformance and scale run: `uvfs mount --source SRC MNT`.
#
#   scripts/passthrough-ci.sh
#   PT_FILES=20000 FSX_NUMOPS=20000 scripts/passthrough-ci.sh   # quicker
#
# Builds the release binary and runs, each on its own passthrough mount:
#   1. pjdfstest (scripts/pjdfstest.sh) over a source directory on ext4
#      (/var/tmp): 0 failures required, as on native ext4;
#   2. fsx (scripts/fsx.sh, FSX_SEEDS x FSX_NUMOPS, then FSX_FULL_SEEDS x
#      FSX_FULL_OPS with fsx's full op mix) over a source directory on
#      tmpfs (/dev/shm) -- fsx's msyncs become real fsyncs through a
#      passthrough, which on a disk-backed source cost minutes per seed;
#      the kernel does reads and writes on the source files (checked: no
#      READ or WRITE reaches the server); then FSX_SEEDS x
#      FSX_SERVER_IO_OPS and the full mix again with --server-io;
#   2b. scripts/difftest.py: DIFF_SEEDS x 2,000 random operations on the
#      mount and on a plain ext4 directory, every result compared;
#   2c. scripts/coherence-stress.py: COH_OPS host-side changes of the
#      source racing readers on the mount, 0 stale results after each
#      batch's window; again with fanotify's queue made to overflow
#      (COH_OVERFLOW_OPS); pjdfstest once more with --no-watch;
#   3. the scale walk: a PT_FILES-file tree created under /var/tmp, walked
#      with find + stat through a mount with vnode limit PT_VNODES (below
#      the tree size) under the process's fd limit. Required: every file
#      seen, no EMFILE, the fd pool never above its budget, the server's
#      /proc/PID/fd count never above the budget plus the fds it holds
#      outside the pool (sampled), and the mount's vnode count kept under
#      its limit (peak from the server's statistics).
# Prints measured numbers; exits 1 if anything failed. Needs root,
# /dev/fuse, pjdfstest and fsx (scripts/install-deps.sh).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
export PATH="$HOME/.cargo/bin:$PATH"
PT_FILES=${PT_FILES:-200000}
PT_VNODES=${PT_VNODES:-50000}
export FSX_SEEDS=${FSX_SEEDS:-"1 2 3"}
export FSX_NUMOPS=${FSX_NUMOPS:-100000}
FSX_FULL_SEEDS=${FSX_FULL_SEEDS:-"4 5 6"}
FSX_FULL_OPS=${FSX_FULL_OPS:-20000}
FSX_SERVER_IO_OPS=${FSX_SERVER_IO_OPS:-20000}
DIFF_SEEDS=${DIFF_SEEDS:-40}
COH_OPS=${COH_OPS:-100000}
COH_OVERFLOW_OPS=${COH_OVERFLOW_OPS:-20000}
PASSED=0
FAILED=0
pass() { echo "PASS: $* [at ${SECONDS}s]"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $* [at ${SECONDS}s]"; FAILED=$((FAILED + 1)); }

if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then
    echo "passthrough-ci.sh needs root and /dev/fuse"; exit 1
fi
cargo build --release -p uvfs-cli || exit 1
UVFS="$CARGO_TARGET_DIR/release/uvfs"

WORK=$(mktemp -d /var/tmp/uvfs-pt-ci.XXXXXX)
SHM=$(mktemp -d /dev/shm/uvfs-pt-ci.XXXXXX)
MNT=$(mktemp -d /tmp/uvfs-pt-mnt.XXXXXX)
cleanup() {
    umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
    rmdir "$MNT" 2>/dev/null
    rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT

counter() { # counter NAME: a counter of the running server's statistics
    "$UVFS" stat --json "$MNT" | python3 -c \
        "import json,sys; print(json.load(sys.stdin)['counters'].get('$1', -1))"
}
server_pid() {
    "$UVFS" stat --json "$MNT" | python3 -c "import json,sys; print(json.load(sys.stdin)['pid'])"
}
mount_pt() { # mount_pt SRC [ARGS...]
    local src=$1; shift
    "$UVFS" mount --source "$src" "$@" "$MNT" || { fail "mount --source $src"; return 1; }
    echo "  mounted $src: transport $([ "$(counter fuse.uring)" = 1 ] && echo io_uring || echo /dev/fuse)"
}

# --- 1. pjdfstest on an ext4 source -------------------------------------
mkdir -p "$WORK/pjd"
if mount_pt "$WORK/pjd"; then
    "$ROOT/scripts/pjdfstest.sh" "$MNT" > "$WORK/pjd.out" 2>&1
    rc=$?
    summary=$(grep '^pjdfstest:' "$WORK/pjd.out" || tail -3 "$WORK/pjd.out")
    grep -E '^  (FAIL|XPASS)' "$WORK/pjd.out"
    if [ "$rc" -eq 0 ]; then
        pass "pjdfstest: $summary"
    else
        fail "pjdfstest: $summary"
    fi
    umount "$MNT"
fi

# --- 2. fsx on a tmpfs source --------------------------------------------
# Reads, writes and mappings are the kernel's, on the source files (FUSE
# passthrough) where this kernel allows it; then again served by the
# server (--server-io).
if mount_pt "$SHM"; then
    if "$ROOT/scripts/fsx.sh" "$MNT"; then
        pass "fsx: seeds [$FSX_SEEDS] x $FSX_NUMOPS ops"
    else
        fail "fsx"
    fi
    if [ "$(counter fuse.kernel_io)" = 1 ]; then
        kopens=$(counter fuse.kernel_io.opens)
        reads=$(counter fuse.requests.op.read)
        writes=$(counter fuse.requests.op.write)
        echo "  kernel I/O: $kopens opens on backing files; READ $reads, WRITE $writes requests"
        [ "$kopens" -gt 0 ] && [ "$reads" = 0 ] && [ "$writes" = 0 ] \
            && pass "fsx: every read and write done by the kernel on the source files" \
            || fail "fsx: kernel I/O on, yet $reads READs and $writes WRITEs reached the server"
    else
        echo "  kernel I/O on backing files not available here: reads and writes went through the server"
    fi
    # fsx's full mix: fallocate, punch hole, sendfile, copy_file_range
    # (passed on to the source's file system), close/open, fsync, ...
    if FSX_PROFILE=full FSX_SEEDS="$FSX_FULL_SEEDS" FSX_NUMOPS="$FSX_FULL_OPS" \
        "$ROOT/scripts/fsx.sh" "$MNT"; then
        pass "fsx (full op mix): seeds [$FSX_FULL_SEEDS] x $FSX_FULL_OPS ops"
    else
        fail "fsx (full op mix)"
    fi
    umount "$MNT"
fi
if mount_pt "$SHM" --server-io; then
    if FSX_NUMOPS="$FSX_SERVER_IO_OPS" "$ROOT/scripts/fsx.sh" "$MNT"; then
        pass "fsx (--server-io): seeds [$FSX_SEEDS] x $FSX_SERVER_IO_OPS ops, $(counter fuse.requests.op.write) WRITEs served"
    else
        fail "fsx (--server-io)"
    fi
    if FSX_PROFILE=full FSX_SEEDS="$FSX_FULL_SEEDS" FSX_NUMOPS="$FSX_FULL_OPS" \
        "$ROOT/scripts/fsx.sh" "$MNT"; then
        pass "fsx (--server-io, full op mix): seeds [$FSX_FULL_SEEDS] x $FSX_FULL_OPS ops"
    else
        fail "fsx (--server-io, full op mix)"
    fi
    umount "$MNT"
fi

if mount_pt "$SHM" --no-watch; then
    if FSX_SEEDS=7 FSX_NUMOPS="$FSX_SERVER_IO_OPS" "$ROOT/scripts/fsx.sh" "$MNT"; then
        pass "fsx (--no-watch): seed 7 x $FSX_SERVER_IO_OPS ops"
    else
        fail "fsx (--no-watch)"
    fi
    umount "$MNT"
fi

# --- 2b. differential test against ext4 ----------------------------------
# The same random operations (scripts/difftest.py) on a passthrough of an
# ext4 directory and on another ext4 directory: every result must match.
mkdir -p "$WORK/diff-src" "$WORK/diff-ref"
if mount_pt "$WORK/diff-src"; then
    if python3 "$ROOT/scripts/difftest.py" "$MNT" "$WORK/diff-ref" \
        --tmpfile --seed 1000 --seeds "$DIFF_SEEDS" --ops 2000 > "$WORK/diff.out" 2>&1; then
        pass "difftest vs ext4: $(tail -1 "$WORK/diff.out")"
    else
        grep -A40 '^DIVERGENCE' "$WORK/diff.out" | head -60
        fail "difftest vs ext4"
    fi
    umount "$MNT"
fi

# --- 2c. coherence with the host ------------------------------------------
# A default mount caches for a day and relies on its host-change watcher:
# scripts/coherence-stress.py changes the source directly while readers go
# through the mount, and after each batch (and a window) compares every
# touched path on both sides; 0 stale results required. Then the same
# with fanotify's queue made tiny (the group takes the limit at its
# creation) so that events are lost: the overflow must invalidate
# everything, still 0 stale. And pjdfstest once more without the watcher.
mkdir -p "$WORK/coh" "$WORK/coh-small" "$WORK/pjd-nowatch"
if mount_pt "$WORK/coh"; then
    if [ "$(counter passthrough.watch.active)" != 1 ]; then
        fail "coherence: the watcher is not active on a default mount"
    elif python3 "$ROOT/scripts/coherence-stress.py" "$WORK/coh" "$MNT" \
        --ops "$COH_OPS" --batch 100 --window-ms 25 > "$WORK/coh.out" 2>&1; then
        pass "coherence: $(tail -1 "$WORK/coh.out")"
    else
        grep STALE "$WORK/coh.out" | head -10
        fail "coherence: $(tail -1 "$WORK/coh.out")"
    fi
    umount "$MNT"
fi
QMAX=/proc/sys/fs/fanotify/max_queued_events
if [ -w "$QMAX" ]; then
    qold=$(cat "$QMAX")
    echo 32 > "$QMAX"
    mount_pt "$WORK/coh-small"; ok=$?
    echo "$qold" > "$QMAX"
    if [ "$ok" = 0 ]; then
        # One overflow for sure: a watcher that keeps up with the stress
        # below loses nothing (on a loaded machine the writer slows down
        # more than the watcher, which runs at nice -10), and the check
        # would test nothing. Files read through the mount are changed
        # on the host while the server is stopped, which fills a queue of
        # 32; once it runs again they must read as the host has them.
        for i in $(seq 64); do echo old > "$WORK/coh-small/ovf$i"; done
        for i in $(seq 64); do cat "$MNT/ovf$i" > /dev/null; done
        spid=$(server_pid)
        kill -STOP "$spid"
        for i in $(seq 64); do echo "new $i" > "$WORK/coh-small/ovf$i"; done
        kill -CONT "$spid"
        for _ in $(seq 100); do
            [ "$(counter passthrough.watch.overflows)" != 0 ] && break
            sleep 0.05
        done
        sleep 0.05
        stale=0
        for i in $(seq 64); do [ "$(cat "$MNT/ovf$i")" = "new $i" ] || stale=$((stale + 1)); done
        [ "$stale" = 0 ] || fail "coherence after a forced overflow: $stale of 64 files stale"
        if python3 "$ROOT/scripts/coherence-stress.py" "$WORK/coh-small" "$MNT" \
            --ops "$COH_OVERFLOW_OPS" --batch 500 --window-ms 50 --seed 2 > "$WORK/coh2.out" 2>&1; then
            ovf=$(counter passthrough.watch.overflows)
            if [ "$ovf" -gt 0 ]; then
                pass "coherence after $ovf overflows: $(tail -1 "$WORK/coh2.out")"
            else
                fail "coherence with a tiny queue: no overflow happened ($(tail -1 "$WORK/coh2.out"))"
            fi
        else
            grep STALE "$WORK/coh2.out" | head -10
            fail "coherence with overflows: $(tail -1 "$WORK/coh2.out")"
        fi
        umount "$MNT"
    fi
fi
if mount_pt "$WORK/pjd-nowatch" --no-watch; then
    "$ROOT/scripts/pjdfstest.sh" "$MNT" > "$WORK/pjd2.out" 2>&1
    rc=$?
    summary=$(grep '^pjdfstest:' "$WORK/pjd2.out" || tail -3 "$WORK/pjd2.out")
    if [ "$rc" -eq 0 ]; then
        pass "pjdfstest --no-watch: $summary"
    else
        grep -E '^  (FAIL|XPASS)' "$WORK/pjd2.out"
        fail "pjdfstest --no-watch: $summary"
    fi
    umount "$MNT"
fi

# --- 3. the scale walk ---------------------------------------------------
TREE="$WORK/tree"
echo "creating $PT_FILES files under $TREE"
python3 - "$TREE" "$PT_FILES" <<'EOF'
import os, sys
base, n = sys.argv[1], int(sys.argv[2])
per = 1000
for d in range((n + per - 1) // per):
    p = f"{base}/d{d:04}"
    os.makedirs(p)
    for f in range(min(per, n - d * per)):
        os.close(os.open(f"{p}/f{f:04}", os.O_CREAT | os.O_WRONLY, 0o644))
EOF
if mount_pt "$TREE" --vnodes "$PT_VNODES"; then
    PID=$(server_pid)
    BUDGET=$(counter passthrough.fds.budget)
    BASE=$(( $(ls /proc/"$PID"/fd | wc -l) - $(counter passthrough.fds.used) ))
    ( max=0
      while [ -d /proc/"$PID" ] && [ ! -e "$WORK/walk.done" ]; do
          n=$(ls /proc/"$PID"/fd 2>/dev/null | wc -l)
          [ "$n" -gt "$max" ] && max=$n && echo "$max" > "$WORK/fdmax"
          sleep 0.2
      done ) &
    SAMPLER=$!
    t0=$SECONDS
    find "$MNT" -type f -exec stat -c '%i' {} + > "$WORK/walk.ino" 2> "$WORK/walk.err"
    dt=$((SECONDS - t0))
    touch "$WORK/walk.done"
    wait "$SAMPLER"
    SEEN=$(wc -l < "$WORK/walk.ino")
    UNIQUE=$(sort -u "$WORK/walk.ino" | wc -l)
    EMFILE=$(grep -c 'Too many open files' "$WORK/walk.err")
    ERRS=$(wc -l < "$WORK/walk.err")
    POOLMAX=$(counter passthrough.fds.max_used)
    EXHAUSTED=$(counter passthrough.fds.exhausted)
    FDMAX=$(cat "$WORK/fdmax" 2>/dev/null || echo 0)
    VMAX=$(counter fuse.evict.max_vnodes)
    VNOW=$(counter mount.vnodes)
    SENT=$(counter fuse.evict.sent)
    echo "walk: $SEEN files stat'ed ($UNIQUE distinct inode numbers) in ${dt}s; errors $ERRS (EMFILE $EMFILE)"
    echo "fds: budget $BUDGET, pool max $POOLMAX, refused $EXHAUSTED; /proc/$PID/fd max $FDMAX (sampled; $BASE outside the pool)"
    echo "vnodes: limit $PT_VNODES, peak $VMAX, now $VNOW; $SENT kernel-forget requests sent"
    [ "$SEEN" = "$PT_FILES" ] && [ "$UNIQUE" = "$PT_FILES" ] && [ "$ERRS" = 0 ] \
        && pass "walk: all $PT_FILES files seen, no errors" \
        || fail "walk: $SEEN/$PT_FILES files seen, $ERRS errors (EMFILE $EMFILE)"
    [ "$POOLMAX" -le "$BUDGET" ] && [ "$EXHAUSTED" = 0 ] && [ "$FDMAX" -le $((BUDGET + BASE)) ] \
        && pass "fds: pool max $POOLMAX <= budget $BUDGET, /proc max $FDMAX <= $((BUDGET + BASE))" \
        || fail "fds: pool max $POOLMAX, budget $BUDGET, refused $EXHAUSTED, /proc max $FDMAX"
    [ "$PT_FILES" -le "$PT_VNODES" ] || { [ "$VMAX" -le "$PT_VNODES" ] && [ "$VNOW" -le "$PT_VNODES" ]; } \
        && pass "vnodes: peak $VMAX <= limit $PT_VNODES" \
        || fail "vnodes: peak $VMAX, now $VNOW, limit $PT_VNODES"
    umount "$MNT"
fi

echo "passthrough-ci: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
