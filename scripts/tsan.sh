#!/usr/bin/env bash
# ThreadSanitizer run: the concurrent crates' tests, then a TSan-built
# `uvfs` server (memfs, then passthrough under tight fd and vnode limits,
# with kernel I/O and with --server-io)
# under multi-process stress. Any race report fails the run.
#
# loom explores the refcount and lock state machines exhaustively on small
# models; TSan watches the real code, at full size, for accesses the models
# leave out (plain fields next to the atomics, the FUSE server's glue).
#
# Needs the nightly toolchain (preinstalled; the product builds on stable)
# and its rust-src (installed here: TSan needs std rebuilt instrumented,
# or std's own atomics would be invisible to it and every Arc a "race").
# The binary uses the system allocator in this build (`--cfg uvfs_tsan`):
# TSan cannot see inside mimalloc and would report every reused block.
#
# Env: TSAN_STRESS_SECS (default 30), CARGO_TARGET_DIR/tsan is the build.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SECS=${TSAN_STRESS_SECS:-30}
TARGET=x86_64-unknown-linux-gnu
TDIR="${CARGO_TARGET_DIR:-$ROOT/target}/tsan"
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
export RUSTFLAGS="-Zsanitizer=thread --cfg uvfs_tsan"
export RUSTDOCFLAGS="-Zsanitizer=thread"
LOGS=$(mktemp -d /tmp/uvfs-tsan.XXXXXX)
FAILED=0
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
pass() { echo "PASS: $*"; }

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal || exit 1
rustup component list --toolchain nightly --installed | grep -q '^rust-src' ||
    rustup component add rust-src --toolchain nightly || exit 1

build() {
    cargo +nightly "$@" -Zbuild-std --target "$TARGET" --target-dir "$TDIR" \
        >"$LOGS/build.log" 2>&1 || { tail -40 "$LOGS/build.log"; exit 1; }
}

# The report count of one run's logs (log_path writes LOG.pid per process).
races() { cat "$1".* 2>/dev/null | grep -c 'WARNING: ThreadSanitizer'; }

# --- 1. the crates' own tests ---------------------------------------------
CRATES=(uvfs-rangelock uvfs-vnode uvfs-memfs uvfs-passthrough uvfs-fuse)
build test --no-run "${CRATES[@]/#/-p}"
bins=$(cargo +nightly test -Zbuild-std --target "$TARGET" --target-dir "$TDIR" \
    --no-run --message-format=json "${CRATES[@]/#/-p}" 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["manifest_path"].rsplit("/", 1)[0], m["executable"])')
while read -r dir exe; do
    name=$(basename "$exe")
    case "$name" in loom_*) continue ;; esac # loom models: --cfg loom only
    runs=("default")
    # The reader-bias path is the default; the slot path behind it runs
    # when bias is off. Tests that assert bias itself are skipped there.
    case "$name" in rangelock-* | atomicity-* | audit-* | uvfs_rangelock-*) runs+=("nobias") ;; esac
    for run in "${runs[@]}"; do
        log="$LOGS/$name.$run"
        env=(TSAN_OPTIONS="halt_on_error=0 log_path=$log")
        args=(--test-threads 2)
        if [ "$run" = nobias ]; then
            env+=(UVFS_RANGELOCK_NO_BIAS=1)
            args+=(--skip bias --skip a_new_lock_at_a_reused_address)
        fi
        if (cd "$dir" && env "${env[@]}" timeout 900 "$exe" "${args[@]}") >"$log.out" 2>&1; then
            n=$(races "$log")
            [ "$n" = 0 ] && pass "$name ($run): $(grep 'test result' "$log.out")" ||
                fail "$name ($run): $n race reports"
        else
            tail -30 "$log.out"
            fail "$name ($run): tests failed ($(races "$log") race reports)"
        fi
    done
done <<<"$bins"

# --- 2. a TSan-built server under stress ----------------------------------
build build -p uvfs-cli
UVFS="$TDIR/$TARGET/debug/uvfs"
MNT=$(mktemp -d /tmp/uvfs-tsan-mnt.XXXXXX)
SRC=$(mktemp -d /var/tmp/uvfs-tsan-src.XXXXXX)
cleanup() {
    umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
    rmdir "$MNT" 2>/dev/null
    rm -rf "$SRC"
}
trap cleanup EXIT
export TSAN_OPTIONS="halt_on_error=0 log_path=$LOGS/server"

# serve NAME ARGS...: mount, stress, fsx, copy a tree in, walk it twice
# with cache drops between (FORGETs, evictions), unmount.
serve() {
    local what=$1
    shift
    "$UVFS" mount "$@" "$MNT" || { fail "$what: mount"; return; }
    python3 scripts/stress.py "$MNT/stress" "$SECS" 4 >"$LOGS/stress-$what.log" 2>&1 ||
        fail "$what: stress ($(tail -1 "$LOGS/stress-$what.log"))"
    rm -rf "$MNT/stress"
    if command -v fsx >/dev/null; then
        fsx -N 20000 -S 5 -P /tmp "$MNT/fsx" >"$LOGS/fsx-$what.log" 2>&1 ||
            fail "$what: fsx ($(tail -1 "$LOGS/fsx-$what.log"))"
        rm -f "$MNT/fsx"
    fi
    cp -r "$SRC/tree" "$MNT/copy" || fail "$what: copy a tree in"
    for _ in 1 2; do
        find "$MNT" -type f -print0 | xargs -0 -P 2 -n 500 stat >/dev/null ||
            fail "$what: walk"
        echo 2 >/proc/sys/vm/drop_caches
    done
    umount "$MNT" || fail "$what: unmount"
    # The server exits after the unmount; its report is written at exit.
    # Under ThreadSanitizer on a loaded machine the exit can take seconds.
    for _ in $(seq 300); do pgrep -f "$UVFS mount" >/dev/null || break; sleep 0.2; done
}

mkdir -p "$SRC/tree"
for d in $(seq 40); do
    mkdir "$SRC/tree/d$d"
    for f in $(seq 100); do echo "$d.$f" >"$SRC/tree/d$d/f$f"; done
done
serve memfs --vnodes 1000 --threads 4 --size 256m
serve passthrough --source "$SRC" --fd-budget 200 --vnodes 2000 --threads 4
# Reads and writes through the server too (the kernel does them above).
serve passthrough-server-io --source "$SRC" --fd-budget 200 --vnodes 2000 --threads 4 --server-io

n=$(races "$LOGS/server")
[ "$n" = 0 ] && pass "server under stress: no race reports" || {
    cat "$LOGS"/server.* | head -120
    fail "server under stress: $n race reports (all in $LOGS)"
}

echo "tsan: $FAILED failed (logs in $LOGS)"
[ "$FAILED" = 0 ] && rm -rf "$LOGS"
[ "$FAILED" = 0 ]
