#!/usr/bin/env bash
# Live upgrade under load (issue 28), on memfs and on a passthrough, both
# served through /dev/fuse (`--transport dev`: a mount served through
# FUSE over io_uring refuses to upgrade, see crates/fuse/src/upgrade/):
#   1. fsx, both op mixes, while the server is upgraded UPGRADES times:
#      0 fsx errors, and the last server's generation is UPGRADES;
#   2. pjdfstest while the server is upgraded every quarter second: 0
#      failures;
#   3. passthrough: HANDLES files' handles (name_to_handle_at on the
#      mount) open the right files after drop_caches and an upgrade, and
#      the handle of a file removed on the source answers ESTALE.
# Then crash recovery of a passthrough (its supervisor starts a new server
# when one dies):
#   4. fsx, both op mixes, while the server is killed with SIGKILL KILLS
#      times: 0 fsx errors, generation KILLS;
#   5. the file handles of 3 after drop_caches and a SIGKILL.
# Needs root, /dev/fuse, fsx, pjdfstest, python3 (scripts/install-deps.sh).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
UVFS=${UVFS_BIN:-$CARGO_TARGET_DIR/release/uvfs}
UPGRADES=${UPGRADES:-20}
KILLS=${KILLS:-20}
FSX_OPS=${FSX_OPS:-60000}
HANDLES=${HANDLES:-10000}
PASSED=0
FAILED=0
pass() { echo "PASS: $* [at ${SECONDS}s]"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $* [at ${SECONDS}s]"; FAILED=$((FAILED + 1)); }
counter() { "$UVFS" stat --json "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['counters']['$2'])"; }

[ -x "$UVFS" ] || cargo build --release -p uvfs-cli || exit 1
WORK=$(mktemp -d /tmp/uvfs-upgrade-ci.XXXXXX)
MNT="$WORK/mnt"
SRC="$WORK/src"
mkdir -p "$MNT" "$SRC" "$WORK/secondary"
# pjdfstest works as other users too: they must reach the mount.
chmod 755 "$WORK"
cleanup() {
    umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# upgrades N: N upgrades of $MNT, a short pause apart; 0 if all worked.
upgrades() {
    local i out
    for i in $(seq 1 "$1"); do
        sleep 0.3
        if ! out=$("$UVFS" upgrade "$MNT" 2>&1); then
            echo "upgrade $i: $out"
            return 1
        fi
    done
    echo "last: $out"
}

for fs in memfs passthrough; do
    args=(--transport dev)
    [ "$fs" = passthrough ] && args+=(--source "$SRC")
    "$UVFS" mount "${args[@]}" "$MNT" || { fail "$fs: mount"; continue; }
    gen0=$(counter "$MNT" server.generation)
    # 1. fsx under upgrades.
    FSX_SEEDS="21 22" FSX_NUMOPS="$FSX_OPS" "$ROOT/scripts/fsx.sh" "$MNT" > "$WORK/fsx1.log" 2>&1 &
    f1=$!
    FSX_PROFILE=full FSX_SEEDS="23" FSX_NUMOPS=$((FSX_OPS / 3)) "$ROOT/scripts/fsx.sh" "$MNT" > "$WORK/fsx2.log" 2>&1 &
    f2=$!
    up_ok=1
    upgrades "$UPGRADES" > "$WORK/up.log" 2>&1 || up_ok=0
    wait "$f1"; r1=$?
    wait "$f2"; r2=$?
    gen=$(counter "$MNT" server.generation)
    if [ "$up_ok" = 1 ] && [ "$r1" = 0 ] && [ "$r2" = 0 ] && [ "$gen" = $((gen0 + UPGRADES)) ]; then
        pass "$fs: fsx (both op mixes) across $UPGRADES upgrades, $(tail -1 "$WORK/up.log")"
    else
        tail -5 "$WORK/fsx1.log" "$WORK/fsx2.log" "$WORK/up.log"
        fail "$fs: fsx across upgrades (upgrades ok=$up_ok, fsx $r1/$r2, generation $gen)"
    fi
    # 2. pjdfstest while upgraded over and over (it runs for seconds).
    mkdir -p "$MNT/pjd"
    (cd "$MNT/pjd" && pjdfstest -c "$ROOT/scripts/pjdfstest.toml" -p "$MNT/pjd" -s "$WORK/secondary") > "$WORK/pjd.log" 2>&1 &
    pj=$!
    n=0
    while kill -0 "$pj" 2>/dev/null; do
        sleep 0.25
        kill -0 "$pj" 2>/dev/null || break
        "$UVFS" upgrade "$MNT" > /dev/null 2>> "$WORK/pjd-up.log" && n=$((n + 1))
    done
    wait "$pj"
    summary=$(grep '^Summary:' "$WORK/pjd.log")
    if [ "$(echo "$summary" | sed -n 's/^Summary: \([0-9]*\) failed.*/\1/p')" = 0 ] && [ "$n" -gt 0 ]; then
        pass "$fs: pjdfstest with $n upgrades while it ran: $summary"
    else
        grep -B1 -A6 'FAILED$' "$WORK/pjd.log" | head -40
        cat "$WORK/pjd-up.log" 2>/dev/null | tail -5
        fail "$fs: pjdfstest across upgrades (${summary:-no summary}, $n upgrades)"
    fi
    rm -rf "$MNT/pjd"
    # 3. handles (passthrough).
    if [ "$fs" = passthrough ]; then
        if python3 "$ROOT/scripts/handles-check.py" save "$MNT" "$HANDLES" "$WORK/handles.json" &&
            sync && echo 3 > /proc/sys/vm/drop_caches &&
            "$UVFS" upgrade "$MNT" > /dev/null &&
            echo 3 > /proc/sys/vm/drop_caches &&
            python3 "$ROOT/scripts/handles-check.py" check "$MNT" "$WORK/handles.json" &&
            rm "$SRC/h/f7" &&
            python3 "$ROOT/scripts/handles-check.py" gone "$MNT" "$WORK/handles.json" 7; then
            pass "passthrough: $HANDLES file handles open the right files after drop_caches and an upgrade; a removed file's answers ESTALE"
        else
            fail "passthrough: file handles across an upgrade"
        fi
    fi
    umount "$MNT" || { fail "$fs: umount"; umount -l "$MNT"; }
done

# kills N: N SIGKILLs of $MNT's server, each once its successor answers.
kills() {
    local i pid new
    for i in $(seq 1 "$1"); do
        sleep 0.3
        pid=$("$UVFS" stat --json "$MNT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])') || return 1
        kill -KILL "$pid"
        for _ in $(seq 1 300); do
            new=$("$UVFS" stat --json "$MNT" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null)
            [ -n "$new" ] && [ "$new" != "$pid" ] && break
            sleep 0.05
        done
        [ -n "$new" ] && [ "$new" != "$pid" ] || { echo "kill $i: no new server"; return 1; }
    done
    echo "last server pid $new"
}

"$UVFS" mount --transport dev --source "$SRC" -o log_file="$WORK/crash.log" "$MNT" || fail "crash: mount"
if grep -q " $MNT " /proc/mounts; then
    gen0=$(counter "$MNT" server.generation)
    FSX_SEEDS="31 32" FSX_NUMOPS="$FSX_OPS" "$ROOT/scripts/fsx.sh" "$MNT" > "$WORK/fsx1.log" 2>&1 &
    f1=$!
    FSX_PROFILE=full FSX_SEEDS="33" FSX_NUMOPS=$((FSX_OPS / 3)) "$ROOT/scripts/fsx.sh" "$MNT" > "$WORK/fsx2.log" 2>&1 &
    f2=$!
    k_ok=1
    kills "$KILLS" > "$WORK/kills.log" 2>&1 || k_ok=0
    wait "$f1"; r1=$?
    wait "$f2"; r2=$?
    gen=$(counter "$MNT" server.generation)
    if [ "$k_ok" = 1 ] && [ "$r1" = 0 ] && [ "$r2" = 0 ] && [ "$gen" = $((gen0 + KILLS)) ]; then
        pass "passthrough: fsx (both op mixes) across $KILLS SIGKILLs of the server, $(tail -1 "$WORK/kills.log")"
    else
        tail -5 "$WORK/fsx1.log" "$WORK/fsx2.log" "$WORK/kills.log"
        grep -E "ERROR|WARN" "$WORK/crash.log" | tail -10
        fail "passthrough: fsx across SIGKILLs (kills ok=$k_ok, fsx $r1/$r2, generation $gen)"
    fi
    rm -rf "$SRC/h"
    if python3 "$ROOT/scripts/handles-check.py" save "$MNT" "$HANDLES" "$WORK/handles.json" &&
        sync && echo 3 > /proc/sys/vm/drop_caches &&
        kills 1 > /dev/null &&
        echo 3 > /proc/sys/vm/drop_caches &&
        python3 "$ROOT/scripts/handles-check.py" check "$MNT" "$WORK/handles.json" &&
        rm "$SRC/h/f7" &&
        python3 "$ROOT/scripts/handles-check.py" gone "$MNT" "$WORK/handles.json" 7; then
        pass "passthrough: $HANDLES file handles open the right files after drop_caches and a SIGKILL of the server; a removed file's answers ESTALE"
    else
        fail "passthrough: file handles across a SIGKILL"
    fi
    umount "$MNT" || { fail "crash: umount"; umount -l "$MNT"; }
fi

echo "upgrade-ci: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
