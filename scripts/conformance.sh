#!/usr/bin/env bash
# Conformance and stress run of memfs over FUSE.
#
#   scripts/conformance.sh            # everything
#   FSX_OPS=10000 STRESS_SECS=10 scripts/conformance.sh   # quicker
#
# Builds the release binary, mounts memfs with `uvfs mount`, and runs:
#   1. pjdfstest (0 failures required; skipped tests print their reason),
#   2. fsx with FSX_OPS operations for each seed in FSX_SEEDS (fsx's own
#      op mix), then FSX_FULL_OPS for each of FSX_FULL_SEEDS with the full
#      mix (fallocate, punch hole, sendfile, copy_file_range, ...),
#   2b. scripts/difftest.py: DIFF_SEEDS x 2,000 random operations on memfs
#      and on a tmpfs directory, every result compared,
#   2c. where the kernel offers FUSE over io_uring (install-deps turns it
#      on), the main mount takes its requests that way; then a second
#      mount reading /dev/fuse (--transport dev) gets pjdfstest and
#      difftest too, so both transports are checked,
#   3. a multi-process namespace stress (scripts/stress.py) with cache
#      drops racing lookups against FORGETs, then stress-ng's dentry,
#      rename, link and dir stressors,
#   4. health and vnode accounting: after emptying the mount and dropping
#      the kernel's caches, `uvfs stat --check` must find every active
#      vnode explained by a kernel node, no open handles, no file data,
#   5. signals: SIGTERM unmounts cleanly; after SIGKILL, umount removes
#      the dead mount,
#   6. scripts/passthrough-ci.sh, 6b. scripts/upgrade-ci.sh (live
#      upgrades under fsx and pjdfstest, file handles across one), and
#      7. scripts/unprivileged.sh (memfs and passthrough mounted by a
#      non-root user through fusermount3).
# Needs root and /dev/fuse. Installs what is missing with
# scripts/install-deps.sh (Debian packages, pjdfstest, fsx, the dummy user
# pjdfstest needs).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
FSX_OPS=${FSX_OPS:-100000}
FSX_SEEDS=${FSX_SEEDS:-"1 2 3"}
FSX_FULL_OPS=${FSX_FULL_OPS:-20000}
FSX_FULL_SEEDS=${FSX_FULL_SEEDS:-"4 5 6"}
STRESS_SECS=${STRESS_SECS:-60}
STRESS_PROCS=${STRESS_PROCS:-6}
DIFF_SEEDS=${DIFF_SEEDS:-40}
PASSED=0
FAILED=0
pass() { echo "PASS: $* [at ${SECONDS}s]"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL: $* [at ${SECONDS}s]"; FAILED=$((FAILED + 1)); }

if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then
    echo "conformance.sh needs root and /dev/fuse"; exit 1
fi

# --- tools ---------------------------------------------------------------
# What .ci/run's install-deps phase installs (fast when all is there; run
# here too so the script works on its own).
UVFS_SKIP_PEERS=1 source "$ROOT/scripts/install-deps.sh" || { echo "install-deps failed"; exit 1; }

cargo build --release -p uvfs-cli || exit 1
UVFS="$CARGO_TARGET_DIR/release/uvfs"

MNT=$(mktemp -d /tmp/uvfs-conf.XXXXXX)
SECONDARY=$(mktemp -d /tmp/uvfs-secondary.XXXXXX)
WRAP=$(mktemp -d /tmp/uvfs-wrap.XXXXXX)
cleanup() {
    umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
    if [ -n "${DEV:-}" ]; then umount "$DEV" 2>/dev/null || umount -l "$DEV" 2>/dev/null; rmdir "$DEV" 2>/dev/null; fi
    rm -rf "$SECONDARY" "$WRAP"
    rmdir "$MNT" 2>/dev/null
}
trap cleanup EXIT

"$UVFS" mount --size 4g "$MNT" || { echo "mount failed"; exit 1; }
echo "mounted memfs on $MNT: $(grep " $MNT " /proc/mounts)"
URING=$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null || echo -)
counter() { "$UVFS" stat --json "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['counters']['$2'])"; }
echo "transport: $( [ "$(counter "$MNT" fuse.uring)" = 1 ] && echo "io_uring" || echo "/dev/fuse") (fuse module enable_uring=$URING)"

# --- 1. pjdfstest ---------------------------------------------------------
# Two runs. The main run leaves the EROFS tests out (allow_remount =
# false): pjdfstest 0.2.2 leaks descriptors of deleted files opened for
# writing from earlier tests, and the kernel refuses a read-only remount
# (EBUSY) while any file is open for writing, on any file system. The EROFS
# tests then run in a fresh pjdfstest process with allow_remount = true.
# They remount with mount(8), which for type "fuse" runs the mount.fuse3
# helper: it can mount but not remount, so a wrapper earlier in PATH adds
# `-i` (no helper) and mount(2) remounts, which FUSE supports.
cat > "$WRAP/mount" <<'WRAPPER'
#!/bin/sh
exec /bin/mount -i "$@"
WRAPPER
chmod +x "$WRAP/mount"
sed 's/^allow_remount = false/allow_remount = true/' "$ROOT/scripts/pjdfstest.toml" > "$WRAP/pjdfstest-remount.toml"
mkdir -p "$MNT/pjd"
(cd "$MNT/pjd" && pjdfstest -v -c "$ROOT/scripts/pjdfstest.toml" -p "$MNT/pjd" -s "$SECONDARY") > "$WRAP/pjd.log" 2>&1
(cd "$MNT/pjd" && PATH="$WRAP:$PATH" pjdfstest -v -c "$WRAP/pjdfstest-remount.toml" -p "$MNT/pjd" erofs) > "$WRAP/pjd-erofs.log" 2>&1
summary=$(grep '^Summary:' "$WRAP/pjd.log")
summary_erofs=$(grep '^Summary:' "$WRAP/pjd-erofs.log")
for log in "$WRAP/pjd.log" "$WRAP/pjd-erofs.log"; do
    grep -q '^Summary:' "$log" || { echo "no pjdfstest summary in $log; its end:"; tail -20 "$log"; }
done
echo "pjdfstest main run:  $summary"
echo "pjdfstest EROFS run: $summary_erofs"
echo "pjdfstest tests skipped in the main run and why:"
grep -A2 'skipped$' "$WRAP/pjd.log" | sed 's/^/    /'
echo "    (erofs_*: run in the EROFS run above. link::link_count_max: glibc's"
echo "     pathconf(_PC_LINK_MAX) knows LINK_MAX only for file-system types in"
echo "     its table; FUSE is not one, so it answers 127 and pjdfstest cannot"
echo "     learn the limit: the test cannot apply to FUSE.)"
grep -B1 -A6 'FAILED$' "$WRAP/pjd.log" "$WRAP/pjd-erofs.log" | head -80
f1=$(echo "$summary" | sed -n 's/^Summary: \([0-9]*\) failed.*/\1/p')
f2=$(echo "$summary_erofs" | sed -n 's/^Summary: \([0-9]*\) failed.*/\1/p')
failed=$(( ${f1:-999} + ${f2:-999} ))
erofs_passed=$(echo "$summary_erofs" | sed -n 's/.* \([0-9]*\) passed.*/\1/p')
if [ "${f1:-x}" = 0 ] && [ "${f2:-x}" = 0 ] && [ "${erofs_passed:-0}" -gt 0 ]; then
    pass "pjdfstest: 0 failed ($summary; EROFS run: $summary_erofs)"
else
    fail "pjdfstest: $failed failed"
fi
rm -rf "$MNT/pjd"

# --- 2. fsx ---------------------------------------------------------------
# scripts/fsx.sh runs the seeds at once, each on its own file.
if FSX_SEEDS="$FSX_SEEDS" FSX_NUMOPS="$FSX_OPS" "$ROOT/scripts/fsx.sh" "$MNT"; then
    pass "fsx: seeds [$FSX_SEEDS] x $FSX_OPS operations"
else
    fail "fsx"
fi
# The full mix adds what the built-in one leaves out: close/open, fsync,
# msync(MS_INVALIDATE), posix_fallocate, punch hole, sendfile, fadvise and
# copy_file_range within the file (which memfs serves itself,
# crates/memfs/src/copy.rs).
if FSX_PROFILE=full FSX_SEEDS="$FSX_FULL_SEEDS" FSX_NUMOPS="$FSX_FULL_OPS" \
    "$ROOT/scripts/fsx.sh" "$MNT"; then
    pass "fsx (full op mix): seeds [$FSX_FULL_SEEDS] x $FSX_FULL_OPS operations"
else
    fail "fsx (full op mix)"
fi

# --- 2b. differential test against tmpfs -----------------------------------
# The same random operations (scripts/difftest.py) on memfs and on a tmpfs
# directory; every result, and with --blocks every block count, must match.
DIFF_REF=$(mktemp -d /dev/shm/uvfs-diff-ref.XXXXXX)
mkdir -p "$MNT/diff"
if python3 "$ROOT/scripts/difftest.py" "$MNT/diff" "$DIFF_REF" --blocks --tmpfile \
    --seed 1 --seeds "$DIFF_SEEDS" --ops 2000 > "$WRAP/diff.log" 2>&1; then
    pass "difftest vs tmpfs: $(tail -1 "$WRAP/diff.log")"
else
    grep -A40 '^DIVERGENCE' "$WRAP/diff.log" | head -60
    fail "difftest vs tmpfs"
fi
rm -rf "$MNT/diff" "$DIFF_REF"

# A tiny inode budget on both sides (memfs --inodes, tmpfs nr_inodes):
# which creates, links, whiteout renames, tmpfiles and attributes fail with
# ENOSPC must match too, as must the space they give back.
INO_MNT=$(mktemp -d /tmp/uvfs-conf-ino.XXXXXX)
INO_REF=$(mktemp -d /tmp/uvfs-conf-inoref.XXXXXX)
ino_ok=1
for n in 6 11 20; do
    "$UVFS" mount --inodes "$n" "$INO_MNT" || { ino_ok=0; break; }
    mount -t tmpfs -o "nr_inodes=$n,size=1g" tmpfs "$INO_REF" || { umount "$INO_MNT"; ino_ok=0; break; }
    mkdir "$INO_MNT/diff" "$INO_REF/diff"
    if ! python3 "$ROOT/scripts/difftest.py" "$INO_MNT/diff" "$INO_REF/diff" --tmpfile \
        --seed "$((100 * n))" --seeds 8 --ops 2000 > "$WRAP/diff-ino-$n.log" 2>&1; then
        grep -A40 '^DIVERGENCE' "$WRAP/diff-ino-$n.log" | head -60
        ino_ok=0
    fi
    umount "$INO_MNT"; umount "$INO_REF"
    [ "$ino_ok" = 1 ] || break
done
rmdir "$INO_MNT" "$INO_REF"
if [ "$ino_ok" = 1 ]; then
    pass "difftest with 6, 11 and 20 inodes vs tmpfs nr_inodes: 8 seeds x 2,000 operations each, no divergence"
else
    fail "difftest with a tiny inode budget"
fi

# --- 2c. both transports ----------------------------------------------------
if [ "$URING" = Y ]; then
    total=$(counter "$MNT" fuse.requests)
    ring=$(counter "$MNT" fuse.requests.uring)
    if [ "$(counter "$MNT" fuse.uring)" = 1 ] && [ $((ring * 100)) -ge $((total * 99)) ]; then
        pass "memfs served through io_uring: $ring of $total requests"
    else
        fail "memfs not served through io_uring: $ring of $total requests"
    fi
else
    echo "SKIP: io_uring transport: the kernel does not offer FUSE over io_uring (enable_uring=$URING)"
fi
DEV=$(mktemp -d /tmp/uvfs-conf-dev.XXXXXX)
if "$UVFS" mount --transport dev "$DEV"; then
    mkdir -p "$DEV/pjd"
    (cd "$DEV/pjd" && pjdfstest -c "$ROOT/scripts/pjdfstest.toml" -p "$DEV/pjd" -s "$SECONDARY") > "$WRAP/pjd-dev.log" 2>&1
    summary_dev=$(grep '^Summary:' "$WRAP/pjd-dev.log")
    if [ "$(echo "$summary_dev" | sed -n 's/^Summary: \([0-9]*\) failed.*/\1/p')" = 0 ]; then
        pass "pjdfstest through /dev/fuse: $summary_dev"
    else
        grep -B1 -A6 'FAILED$' "$WRAP/pjd-dev.log" | head -40
        fail "pjdfstest through /dev/fuse: ${summary_dev:-no summary}"
    fi
    rm -rf "$DEV/pjd"
    DIFF_REF=$(mktemp -d /dev/shm/uvfs-diff-ref.XXXXXX)
    mkdir -p "$DEV/diff"
    if python3 "$ROOT/scripts/difftest.py" "$DEV/diff" "$DIFF_REF" --tmpfile \
        --seed 1000 --seeds 10 --ops 2000 > "$WRAP/diff-dev.log" 2>&1; then
        pass "difftest through /dev/fuse: $(tail -1 "$WRAP/diff-dev.log")"
    else
        grep -A40 '^DIVERGENCE' "$WRAP/diff-dev.log" | head -60
        fail "difftest through /dev/fuse"
    fi
    rm -rf "$DEV/diff" "$DIFF_REF"
    [ "$(counter "$DEV" fuse.requests.uring)" = 0 ] || fail "--transport dev took requests through io_uring"
    umount "$DEV" || fail "umount of the /dev/fuse mount"
else
    fail "mount --transport dev"
fi
rmdir "$DEV" 2>/dev/null

# --- 3. stress ------------------------------------------------------------
if python3 "$ROOT/scripts/stress.py" "$MNT/stress" "$STRESS_SECS" "$STRESS_PROCS"; then
    pass "namespace stress ($STRESS_PROCS processes, ${STRESS_SECS}s)"
else
    fail "namespace stress"
fi
mkdir -p "$MNT/sng"
if stress-ng --temp-path "$MNT/sng" --dentry 2 --rename 2 --link 2 --symlink 2 --dir 2 \
        --timeout "$((STRESS_SECS / 2 + 1))s" --metrics-brief 2>&1 | tail -8; then
    pass "stress-ng dentry/rename/link/symlink/dir"
else
    fail "stress-ng"
fi

# --- 4. health and accounting --------------------------------------------
rm -rf "$MNT/stress" "$MNT/sng"
if [ -z "$(ls -A "$MNT")" ] && touch "$MNT/alive" && rm "$MNT/alive"; then
    pass "server healthy after stress"
else
    fail "server unhealthy after stress"
fi
ok=0
for _ in $(seq 1 50); do
    echo 2 > /proc/sys/vm/drop_caches
    if json=$("$UVFS" stat --check --json "$MNT" 2>/dev/null) &&
        python3 - "$json" <<'CHECK'
import json, sys
r = json.loads(sys.argv[1]); c = r["counters"]; a = r["accounting"]
ok = (a["ok"] and a["kernel_nodes"] == 1 and a["open_handles"] == 0
      and c["memfs.inodes.linked"] == 1 and c["memfs.data.bytes"] == 0
      and c["fuse.requests.panics"] == 0 and c["fuse.nodes.forget_excess"] == 0)
print("accounting:", json.dumps(a), "panics", c["fuse.requests.panics"],
      "vnodes", c["mount.vnodes"], "free", c["mount.vnodes.free"],
      "remembered", c["fuse.nodes.remembered"], "forgotten", c["fuse.nodes.forgotten"])
sys.exit(0 if ok else 1)
CHECK
    then ok=1; break; fi
    sleep 0.2
done
if [ $ok = 1 ]; then pass "vnode accounting: every active vnode is a kernel node"; else fail "vnode accounting"; "$UVFS" stat "$MNT"; fi
"$UVFS" stat "$MNT" | head -3
# A reader that leaves at once (EPIPE) ends `uvfs stat` quietly, not with a panic.
errf=$(mktemp)
"$UVFS" stat --json "$MNT" 2>"$errf" | true
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ] && ! grep -q panicked "$errf"; then pass "uvfs stat into a closed pipe"; else fail "uvfs stat into a closed pipe: exit $rc: $(cat "$errf")"; fi
rm -f "$errf"

# --- 5. signals -----------------------------------------------------------
umount "$MNT" && pass "umount of the main mount" || fail "umount"
pid=""
"$UVFS" mount "$MNT" && pid=$("$UVFS" stat --json "$MNT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
[ -n "$pid" ] || fail "remount for the signal tests"
kill -TERM "$pid"
for _ in $(seq 1 50); do grep -q " $MNT " /proc/mounts || break; sleep 0.1; done
if grep -q " $MNT " /proc/mounts; then fail "SIGTERM left the mount"; umount -l "$MNT"; else pass "SIGTERM unmounts cleanly"; fi
pid=""
"$UVFS" mount "$MNT" && pid=$("$UVFS" stat --json "$MNT" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
[ -n "$pid" ] || fail "remount for the SIGKILL test"
kill -KILL "$pid"
sleep 0.5
err=$(ls "$MNT" 2>&1 >/dev/null)
if umount "$MNT" && ! grep -q " $MNT " /proc/mounts; then
    pass "after SIGKILL ($err) umount removes the dead mount"
else
    fail "dead mount could not be removed"; umount -l "$MNT"
fi

# --- 6. passthrough: pjdfstest, fsx, 200k-file walk (its own mounts) ------
if [ -x "$ROOT/scripts/passthrough-ci.sh" ]; then
    "$ROOT/scripts/passthrough-ci.sh" && pass "passthrough-ci.sh" || fail "passthrough-ci.sh"
fi

# --- 6b. live upgrade under load (fsx, pjdfstest, file handles) ----------
UVFS_BIN="$UVFS" "$ROOT/scripts/upgrade-ci.sh" && pass "upgrade-ci.sh" || fail "upgrade-ci.sh"

# --- 7. unprivileged mounts: a user mounts both through fusermount3 ------
UVFS_BIN="$UVFS" "$ROOT/scripts/unprivileged.sh" && pass "unprivileged.sh" || fail "unprivileged.sh"

echo "conformance: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
