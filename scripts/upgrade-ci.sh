#!/usr/bin/env bash
# Live upgrade under load (issue 28), on memfs and on a passthrough, both
# served through /dev/fuse (`--transport dev`, the transport that keeps
# every request across a crash; io_uring mounts' upgrades and crashes are
# tested in crates/cli/tests/upgrade.rs, and a crash there fails the few
# requests the kernel had just handed the dead server: docs/STATUS.md):
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
# Each failure is said again, with what explains it (what `note` saved),
# at the end: a CI report that keeps only the tail still shows which
# step failed and why.
FAILURES=""
fail() {
    echo "FAIL: $* [at ${SECONDS}s]"
    FAILED=$((FAILED + 1))
    FAILURES+="FAIL: $*"$'\n'"$(cat "$WORK/why" 2>/dev/null)"$'\n'
    rm -f "$WORK/why"
}
# note: stdin shown now and kept for the failure that follows it.
note() { tee -a "$WORK/why"; }
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

# fsx_across LABEL RESTARTS N SEED: fsx, both op mixes (seeds SEED..SEED+2),
# while `RESTARTS N` (upgrades or kills) replaces $MNT's server N times.
# Passes when every restart worked, fsx found nothing and the server's
# generation moved by exactly N (no restart was missed or doubled).
fsx_across() {
    local label=$1 restarts=$2 n=$3 seed=$4 gen0 gen f1 f2 r1 r2 ok=1
    gen0=$(counter "$MNT" server.generation)
    FSX_SEEDS="$seed $((seed + 1))" FSX_NUMOPS="$FSX_OPS" "$ROOT/scripts/fsx.sh" "$MNT" > "$WORK/fsx1.log" 2>&1 &
    f1=$!
    FSX_PROFILE=full FSX_SEEDS="$((seed + 2))" FSX_NUMOPS=$((FSX_OPS / 3)) "$ROOT/scripts/fsx.sh" "$MNT" > "$WORK/fsx2.log" 2>&1 &
    f2=$!
    "$restarts" "$n" > "$WORK/$restarts.log" 2>&1 || ok=0
    wait "$f1"; r1=$?
    wait "$f2"; r2=$?
    gen=$(counter "$MNT" server.generation)
    if [ "$ok" = 1 ] && [ "$r1" = 0 ] && [ "$r2" = 0 ] && [ "$gen" = $((gen0 + n)) ]; then
        pass "$label: fsx (both op mixes) across $n $restarts, $(tail -1 "$WORK/$restarts.log")"
    else
        tail -n 5 "$WORK/fsx1.log" "$WORK/fsx2.log" "$WORK/$restarts.log" | note
        [ -f "$WORK/crash.log" ] && grep -E "ERROR|WARN" "$WORK/crash.log" | tail -10 | note
        fail "$label: fsx across $restarts ($restarts ok=$ok, fsx $r1/$r2, generation $gen)"
    fi
}

# handles_across WHAT COMMAND...: $HANDLES file handles of the passthrough
# saved, the kernel's caches dropped around COMMAND (which replaces the
# server), then every handle must open its own file and a removed file's
# must answer ESTALE.
handles_across() {
    local what=$1
    shift
    if { python3 "$ROOT/scripts/handles-check.py" save "$MNT" "$HANDLES" "$WORK/handles.json" &&
        sync && echo 3 > /proc/sys/vm/drop_caches &&
        "$@" > /dev/null &&
        echo 3 > /proc/sys/vm/drop_caches &&
        python3 "$ROOT/scripts/handles-check.py" check "$MNT" "$WORK/handles.json" &&
        rm "$SRC/h/f7" &&
        python3 "$ROOT/scripts/handles-check.py" gone "$MNT" "$WORK/handles.json" 7; } 2>&1 | note; then
        rm -f "$WORK/why"
        pass "passthrough: $HANDLES file handles open the right files after drop_caches and $what; a removed file's answers ESTALE"
    else
        fail "passthrough: file handles across $what"
    fi
}

for fs in memfs passthrough; do
    args=(--transport dev)
    [ "$fs" = passthrough ] && args+=(--source "$SRC")
    "$UVFS" mount "${args[@]}" "$MNT" || { fail "$fs: mount"; continue; }
    # 1. fsx under upgrades.
    fsx_across "$fs" upgrades "$UPGRADES" 21
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
        grep -B1 -A6 'FAILED$' "$WORK/pjd.log" | head -40 | note
        tail -5 "$WORK/pjd-up.log" 2>/dev/null | note
        [ -n "$summary" ] || tail -5 "$WORK/pjd.log" | note
        fail "$fs: pjdfstest across upgrades (${summary:-no summary}, $n upgrades)"
    fi
    rm -rf "$MNT/pjd"
    # 3. handles (passthrough).
    [ "$fs" = passthrough ] && handles_across "an upgrade" "$UVFS" upgrade "$MNT"
    umount "$MNT" || { fail "$fs: umount"; umount -l "$MNT"; }
done

# 4, 5. The same through SIGKILLs of a supervised passthrough's server.
"$UVFS" mount --transport dev --source "$SRC" -o log_file="$WORK/crash.log" "$MNT" || fail "crash: mount"
if grep -q " $MNT " /proc/mounts; then
    fsx_across passthrough kills "$KILLS" 31
    rm -rf "$SRC/h"
    handles_across "a SIGKILL of the server" kills 1
    umount "$MNT" || { fail "crash: umount"; umount -l "$MNT"; }
fi

echo "upgrade-ci: $PASSED passed, $FAILED failed"
[ -n "$FAILURES" ] && printf 'upgrade-ci: what failed, again:\n%s' "$FAILURES"
[ "$FAILED" = 0 ]
