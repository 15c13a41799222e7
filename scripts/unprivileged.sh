#!/usr/bin/env bash
# Unprivileged mounts: a user made for the purpose mounts, uses and
# unmounts memfs and a passthrough through fusermount3, as sshfs's and
# rclone's users do.
#
#   scripts/unprivileged.sh        # as root; part of scripts/conformance.sh
#
# /dev/fuse must be 0666 for users (as distributions ship it); the host's
# node is left alone: everything runs in a private mount namespace
# (`unshare -m`) with a node made by `mknod -m 666 X c 10 229` bind-mounted
# over /dev/fuse there. As user UVFS_UNPRIV_USER (default uvfs-unpriv,
# created if missing), with no capabilities and no XDG_RUNTIME_DIR (a
# `runuser` shell), it checks:
#   1. memfs: mount (fusermount3 makes it, nosuid,nodev, user_id = the
#      user), `uvfs stat` through the per-user control socket in
#      /tmp/uvfs-UID (0700), io_uring where the kernel offers it,
#      pjdfstest (scripts/pjdfstest.sh, every test a user can run), fsx,
#      a walk over WALK_FILES files, the --size and --inodes budgets
#      (ENOSPC past them), unmount with `fusermount3 -u`;
#   2. passthrough of a directory in the user's home: the features needing
#      CAP_SYS_ADMIN (watcher, kernel I/O) turned off with one line each,
#      and crash recovery by handle (CAP_DAC_READ_SEARCH) said partial,
#      pjdfstest, fsx, a walk of files made on the host side, `uvfs stat`
#      with XDG_RUNTIME_DIR set (socket in $XDG_RUNTIME_DIR/uvfs),
#      unmount with `uvfs umount`;
#   3. refusals that say why: allow_other without user_allow_other in
#      /etc/fuse.conf, and /dev/fuse at 0600;
#   4. root reading (`uvfs stat`) and unmounting (`uvfs umount`) a mount
#      of the user's; the user mounting and unmounting a line of fstab
#      marked `user` with mount(8) and umount(8).
# Any failed step fails the script. Needs root, unshare, runuser,
# fusermount3 setuid root (Debian: fuse3), pjdfstest and fsx
# (scripts/install-deps.sh).
#
# Environment: UVFS_UNPRIV_USER, FSX_OPS (default 20000), FSX_SEEDS
# (default "1 2"), WALK_FILES (default 3000), UVFS_BIN (a built uvfs to
# use instead of building one).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
USER_NAME=${UVFS_UNPRIV_USER:-uvfs-unpriv}

# ---- the user's part ---------------------------------------------------
# Run as the user inside the namespace: `unprivileged.sh --as-user BIN`.
if [ "${1:-}" = --as-user ]; then
    BIN=$2
    export PATH="$BIN:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    PASSED=0 FAILED=0
    pass() { echo "PASS: $*"; PASSED=$((PASSED + 1)); }
    fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
    uid=$(id -u)
    H=$(mktemp -d "$HOME/uvfs-unpriv.XXXXXX") || exit 1
    cleanup() {
        for m in "$H"/m "$H"/small "$H"/few "$H"/p "$H"/m2; do
            grep -q " $m " /proc/self/mountinfo && fusermount3 -u -z "$m"
        done
        rm -rf "$H"
    }
    trap cleanup EXIT
    mkdir -p "$H/m" "$H/small" "$H/few" "$H/src" "$H/p" "$H/m2" "$H/xdg"
    chmod 700 "$H/xdg"
    [ "$uid" != 0 ] && pass "running as $(id -un) (uid $uid)" || fail "running as root"
    capeff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
    [ "$((16#$capeff))" = 0 ] && pass "no capabilities (CapEff $capeff)" || fail "capabilities $capeff"
    [ -z "${XDG_RUNTIME_DIR:-}" ] || fail "XDG_RUNTIME_DIR is set"
    mountline() { grep " $1 " /proc/self/mountinfo; }
    socket_of() { ls "$1"/*.sock 2>/dev/null | head -1; }

    # walk DIR N: N files in 20 directories, then find and du must see them.
    walk() {
        local d=$1 n=$2 i
        python3 - "$d" "$n" <<'PY' || return 1
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    sub = os.path.join(d, "walk", "d%02d" % (i % 20))
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%05d" % i), "w") as f:
        f.write("x" * (i % 100))
PY
        echo "$(find "$d/walk" -type f | wc -l)"
    }

    # --- 1. memfs ---------------------------------------------------------
    err=$(uvfs mount --size 1g --inodes 100k "$H/m" 2>&1)
    rc=$?
    if [ $rc = 0 ] && line=$(mountline "$H/m"); then
        pass "memfs mounted: $(echo "$line" | cut -d' ' -f5-)"
        case "$line" in
            *"fuse.uvfs"*"user_id=$uid,"*) pass "memfs: fuse.uvfs mount of uid $uid" ;;
            *) fail "memfs: unexpected mount line $line" ;;
        esac
        case "$line" in *nosuid*nodev*) pass "memfs: nosuid,nodev as fusermount3 makes users' mounts" ;; *) fail "memfs: not nosuid,nodev: $line" ;; esac
        echo "  its stderr: $err"
        [ "$(echo "$err" | grep -c .)" -le 1 ] && pass "memfs: at most one line on stderr" || fail "memfs: stderr: $err"
    else
        fail "memfs mount (exit $rc): $err"
    fi
    if [ -d "/tmp/uvfs-$uid" ] && [ "$(stat -c '%U %a' "/tmp/uvfs-$uid")" = "$(id -un) 700" ] && [ -S "$(socket_of "/tmp/uvfs-$uid")" ]; then
        pass "control socket in /tmp/uvfs-$uid (mode 700, the user's)"
    else
        fail "no control socket in /tmp/uvfs-$uid: $(ls -la "/tmp/uvfs-$uid" 2>&1)"
    fi
    if out=$(uvfs stat "$H/m") && echo "$out" | grep -q 'fs "memfs"'; then
        pass "uvfs stat: $(echo "$out" | head -1)"
    else
        fail "uvfs stat on memfs: $out"
    fi
    # FUSE over io_uring needs no privilege: where the kernel offers it,
    # a user's mount is served through it too.
    if [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ]; then
        ring=$(uvfs stat --json "$H/m" | python3 -c 'import json,sys; print(json.load(sys.stdin)["counters"]["fuse.uring"])')
        [ "$ring" = 1 ] && pass "memfs served through io_uring" || fail "memfs not served through io_uring (fuse.uring=$ring)"
    else
        echo "SKIP: io_uring: the kernel does not offer FUSE over io_uring"
    fi
    if PJDFSTEST_TIMEOUT=600 pjdfstest.sh "$H/m" > "$H/pjd-memfs.out" 2>&1; then
        pass "memfs $(grep '^pjdfstest:' "$H/pjd-memfs.out")"
    else
        grep -B2 -A8 -i 'fail' "$H/pjd-memfs.out" | head -60
        fail "memfs pjdfstest: $(grep '^pjdfstest:' "$H/pjd-memfs.out" || tail -3 "$H/pjd-memfs.out")"
    fi
    if FSX_SEEDS="${FSX_SEEDS:-1 2}" FSX_NUMOPS="${FSX_OPS:-20000}" FSX_ARTIFACTS="$H/fsx-memfs" fsx.sh "$H/m"; then
        pass "memfs fsx: seeds [${FSX_SEEDS:-1 2}] x ${FSX_OPS:-20000} ops"
    else
        fail "memfs fsx"
    fi
    n=${WALK_FILES:-3000}
    seen=$(walk "$H/m" "$n")
    [ "$seen" = "$n" ] && pass "memfs walk: find sees $seen of $n files" || fail "memfs walk: find saw $seen of $n files"
    du -s "$H/m/walk" >/dev/null && pass "memfs du" || fail "memfs du"
    rm -rf "$H/m/walk" || fail "memfs rm -rf of the walk"
    # Budgets: a 1 MiB memfs refuses a 2 MiB write; 10 inodes refuse a 20th file.
    if uvfs mount --size 1m "$H/small" 2>/dev/null; then
        if err=$(dd if=/dev/zero of="$H/small/big" bs=64k count=32 2>&1); then
            fail "--size 1m: a 2 MiB write succeeded"
        else
            case "$err" in *"No space left"*) pass "--size 1m: ENOSPC past the budget" ;; *) fail "--size 1m: $err" ;; esac
        fi
        fusermount3 -u "$H/small" || fail "fusermount3 -u of the --size mount"
    else
        fail "mount --size 1m"
    fi
    if uvfs mount --inodes 10 "$H/few" 2>/dev/null; then
        made=0
        for i in $(seq 1 20); do { : > "$H/few/f$i"; } 2>/dev/null && made=$((made + 1)); done
        err=$( : 2>&1 > "$H/few/one-more")
        if [ "$made" -lt 20 ] && [ "$made" -ge 5 ]; then
            case "$err" in *"No space left"*) pass "--inodes 10: $made files made, then ENOSPC" ;; *) fail "--inodes 10: $err" ;; esac
        else
            fail "--inodes 10: $made of 20 files made"
        fi
        fusermount3 -u "$H/few" || fail "fusermount3 -u of the --inodes mount"
    else
        fail "mount --inodes 10"
    fi
    sock=$(socket_of "/tmp/uvfs-$uid")
    if fusermount3 -u "$H/m" && ! mountline "$H/m" >/dev/null; then
        pass "fusermount3 -u unmounts memfs"
    else
        fail "fusermount3 -u of memfs"
    fi
    # The server removes its socket as it exits: wait for that (a `uvfs
    # stat` that fails may only have timed out on a loaded machine).
    for _ in $(seq 1 200); do [ -n "$sock" ] && [ -e "$sock" ] || break; sleep 0.05; done
    if uvfs stat "$H/m" >/dev/null 2>&1; then fail "the memfs server still answers after unmount"; else pass "the memfs server exited"; fi
    [ -n "$sock" ] && [ ! -e "$sock" ] && pass "its control socket is gone" || fail "control socket $sock left behind"

    # --- 2. passthrough ---------------------------------------------------
    n=${WALK_FILES:-3000}
    walk "$H/src" "$n" >/dev/null || fail "making the source tree"
    # A small fd budget, so that the walk below has nodes reopened.
    err=$(XDG_RUNTIME_DIR="$H/xdg" uvfs mount --fd-budget 256 --source "$H/src" "$H/p" 2>&1)
    rc=$?
    if [ $rc = 0 ] && line=$(mountline "$H/p"); then
        pass "passthrough mounted: $(echo "$line" | cut -d' ' -f5-)"
        echo "  its stderr:"; echo "$err" | sed 's/^/    /'
        echo "$err" | grep -q "host-change watcher off: fanotify needs CAP_SYS_ADMIN" &&
            echo "$err" | grep -q "kernel I/O on the source's files off" &&
            echo "$err" | grep -q "crash recovery partial: opening files by handle needs CAP_DAC_READ_SEARCH" &&
            [ "$(echo "$err" | grep -c .)" = 3 ] &&
            pass "passthrough: watcher, kernel I/O and crash recovery by handle said off, one line each" ||
            fail "passthrough: stderr not the three expected lines"
    else
        fail "passthrough mount (exit $rc): $err"
    fi
    if [ -S "$(socket_of "$H/xdg/uvfs")" ] && [ "$(stat -c %a "$H/xdg/uvfs")" = 700 ]; then
        pass "control socket in \$XDG_RUNTIME_DIR/uvfs"
    else
        fail "no control socket in $H/xdg/uvfs"
    fi
    if out=$(XDG_RUNTIME_DIR="$H/xdg" uvfs stat "$H/p") && echo "$out" | grep -q 'fs "passthrough"'; then
        pass "uvfs stat (XDG_RUNTIME_DIR): $(echo "$out" | head -1)"
    else
        fail "uvfs stat on the passthrough: $out"
    fi
    seen=$(find "$H/p/walk" -type f | wc -l)
    [ "$seen" = "$n" ] && pass "passthrough walk: find sees $seen of $n files made on the host" || fail "passthrough walk: $seen of $n"
    # Without CAP_DAC_READ_SEARCH there are no file handles: nodes whose
    # fd the pool took back reopen by parent and name.
    find "$H/p/walk" -type f -exec cat {} + > /dev/null || fail "passthrough: reading the walk's files"
    pcount() { XDG_RUNTIME_DIR="$H/xdg" uvfs stat --json "$H/p" | python3 -c "import json,sys; print(json.load(sys.stdin)['counters']['$1'])"; }
    handles=$(pcount passthrough.handles)
    fallback=$(pcount passthrough.reopen.fallback)
    if [ "$handles" = 0 ] && [ "${fallback:-0}" -gt 0 ]; then
        pass "passthrough: no file handles; $fallback node fds reopened by parent and name"
    else
        fail "passthrough: handles=$handles, reopen.fallback=$fallback"
    fi
    echo changed > "$H/p/walk/d00/f00000" && [ "$(cat "$H/src/walk/d00/f00000")" = changed ] &&
        pass "passthrough: a write reaches the source" || fail "passthrough: write did not reach the source"
    rm -rf "$H/p/walk" && [ ! -e "$H/src/walk" ] && pass "passthrough rm -rf" || fail "passthrough rm -rf"
    mkdir -p "$H/p/pjd"
    if PJDFSTEST_TIMEOUT=600 pjdfstest.sh "$H/p/pjd" > "$H/pjd-pt.out" 2>&1; then
        pass "passthrough $(grep '^pjdfstest:' "$H/pjd-pt.out")"
    else
        grep -B2 -A8 -i 'fail' "$H/pjd-pt.out" | head -60
        fail "passthrough pjdfstest: $(grep '^pjdfstest:' "$H/pjd-pt.out" || tail -3 "$H/pjd-pt.out")"
    fi
    rm -rf "$H/p/pjd"
    if FSX_SEEDS="${FSX_SEEDS:-1 2}" FSX_NUMOPS="${FSX_OPS:-20000}" FSX_ARTIFACTS="$H/fsx-pt" fsx.sh "$H/p"; then
        pass "passthrough fsx: seeds [${FSX_SEEDS:-1 2}] x ${FSX_OPS:-20000} ops"
    else
        fail "passthrough fsx"
    fi
    # From the same session (XDG_RUNTIME_DIR set), `uvfs umount` finds the
    # server's socket and waits for it to exit.
    if XDG_RUNTIME_DIR="$H/xdg" uvfs umount "$H/p" && ! mountline "$H/p" >/dev/null; then
        pass "uvfs umount unmounts the passthrough"
    else
        fail "uvfs umount of the passthrough"
    fi
    # Its log (no system log here) stays beside where the socket was.
    [ -z "$(ls "$H/xdg/uvfs" | grep '\.sock$')" ] && pass "uvfs umount waited for the server (socket gone)" || fail "socket left in $H/xdg/uvfs"
    if [ ! -S /dev/log ]; then
        grep -qs "stopped serving $H/p" "$H"/xdg/uvfs/*.log &&
            pass "the detached server logged its stop beside its socket" ||
            fail "no log of the detached server in $H/xdg/uvfs"
    fi

    # --- 3. refusals that say why ------------------------------------------
    if grep -qx '[[:space:]]*user_allow_other[[:space:]]*' /etc/fuse.conf 2>/dev/null; then
        echo "SKIP: allow_other refusal: /etc/fuse.conf has user_allow_other"
    elif err=$(uvfs mount --allow-other "$H/m2" 2>&1); then
        fail "allow_other without user_allow_other was accepted"
    else
        case "$err" in *user_allow_other*) pass "allow_other refused: $err" ;; *) fail "allow_other: $err" ;; esac
    fi
    mountline "$H/m2" >/dev/null && fail "a refused mount is mounted"

    echo "unprivileged (as $(id -un)): $PASSED passed, $FAILED failed"
    [ "$FAILED" = 0 ]
    exit
fi

# ---- root inside the private mount namespace ---------------------------
# `unprivileged.sh --in-namespace STAGE`.
if [ "${1:-}" = --in-namespace ]; then
    STAGE=$2
    fails=0
    mknod -m 666 "$STAGE/fuse" c 10 229 || exit 1
    mount --bind "$STAGE/fuse" /dev/fuse || exit 1
    echo "in a private mount namespace: $(ls -l /dev/fuse)"
    runuser -u "$USER_NAME" -- env -i HOME="$(getent passwd "$USER_NAME" | cut -d: -f6)" \
        LANG=C.UTF-8 bash "$STAGE/bin/unprivileged.sh" --as-user "$STAGE/bin" || fails=1
    # An administrator reads and unmounts a user's mount: root's `uvfs
    # stat` finds the socket in the owner's runtime directory.
    m=$(runuser -u "$USER_NAME" -- mktemp -d /tmp/uvfs-unpriv-root.XXXXXX)
    if runuser -u "$USER_NAME" -- env -i HOME=/tmp PATH=/usr/bin:/bin "$STAGE/bin/uvfs" mount "$m" 2>/dev/null; then
        if out=$("$STAGE/bin/uvfs" stat "$m" 2>&1) && echo "$out" | grep -q 'fs "memfs"'; then
            echo "PASS: root's uvfs stat on the user's mount: $(echo "$out" | head -1)"
        else
            echo "FAIL: root's uvfs stat on the user's mount: $out"; fails=1
        fi
        if "$STAGE/bin/uvfs" umount "$m" && ! grep -q " $m " /proc/self/mountinfo; then
            echo "PASS: root's uvfs umount of the user's mount"
        else
            echo "FAIL: root's uvfs umount of the user's mount"; fails=1
            umount -l "$m"
        fi
    else
        echo "FAIL: the user's memfs mount for root's checks"; fails=1
    fi
    rmdir "$m"
    # A line of /etc/fstab with `user`: the user mounts and unmounts it
    # with mount(8) and umount(8), which run /sbin/mount.uvfs as the user
    # (links put there by an overlay over this namespace's /sbin, and this
    # namespace's own /etc/fstab).
    mkdir "$STAGE/sbin"
    ln -s "$STAGE/bin/uvfs" "$STAGE/sbin/mount.uvfs"
    sbin=$(readlink -f /sbin)
    m=$(runuser -u "$USER_NAME" -- mktemp -d /tmp/uvfs-unpriv-fstab.XXXXXX)
    { cat /etc/fstab 2>/dev/null; echo "scratch-u $m uvfs user,noauto,fs=memfs,size=10m 0 0"; } > "$STAGE/fstab"
    if [ ! -f /etc/fstab ]; then
        echo "SKIP: fstab user mount: no /etc/fstab to stand in for"
    elif mount -t overlay uvfs-unpriv-sbin -o "lowerdir=$STAGE/sbin:$sbin" "$sbin" &&
        mount --bind "$STAGE/fstab" /etc/fstab; then
        if runuser -u "$USER_NAME" -- mount "$m" &&
            grep -q " $m .* fuse.uvfs scratch-u .*user_id=$(id -u "$USER_NAME")," /proc/self/mountinfo &&
            runuser -u "$USER_NAME" -- sh -c "echo fstab > $m/f && [ \"\$(cat $m/f)\" = fstab ]"; then
            echo "PASS: fstab user mount: $(grep " $m " /proc/self/mountinfo | cut -d' ' -f5-)"
        else
            echo "FAIL: fstab user mount of $m"; fails=1
        fi
        if runuser -u "$USER_NAME" -- umount "$m" && ! grep -q " $m " /proc/self/mountinfo; then
            echo "PASS: fstab user umount"
        else
            echo "FAIL: fstab user umount"; fails=1
            umount -l "$m" 2>/dev/null
        fi
    else
        echo "FAIL: could not stage /sbin/mount.uvfs and /etc/fstab in the namespace"; fails=1
    fi
    rmdir "$m"
    # /dev/fuse as many systems have it for root only: the error must say
    # what to do.
    mknod -m 600 "$STAGE/fuse600" c 10 229 || exit 1
    mount --bind "$STAGE/fuse600" /dev/fuse || exit 1
    m=$(runuser -u "$USER_NAME" -- mktemp -d /tmp/uvfs-unpriv-600.XXXXXX)
    if err=$(runuser -u "$USER_NAME" -- "$STAGE/bin/uvfs" mount "$m" 2>&1); then
        echo "FAIL: mounted with /dev/fuse at 0600"; fails=1
        runuser -u "$USER_NAME" -- fusermount3 -u "$m"
    else
        case "$err" in
            *"/dev/fuse: Permission denied"*"0666"*) echo "PASS: /dev/fuse at 0600 refused: $(echo "$err" | tail -1)" ;;
            *) echo "FAIL: /dev/fuse at 0600: $err"; fails=1 ;;
        esac
    fi
    rmdir "$m"
    exit $fails
fi

# ---- root, on the host -------------------------------------------------
if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then
    echo "unprivileged.sh needs root and /dev/fuse"; exit 1
fi
for t in unshare runuser fusermount3; do
    command -v "$t" >/dev/null || { echo "unprivileged.sh: $t missing (scripts/install-deps.sh)"; exit 1; }
done
FM=$(command -v fusermount3)
if [ "$(stat -L -c %u "$FM")" != 0 ] || [ ! -u "$FM" ]; then
    echo "unprivileged.sh: $FM is not setuid root: $(ls -l "$FM")"; exit 1
fi
cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
case ":$PATH:" in *":$cargo_bin:"*) ;; *) PATH="$cargo_bin:$PATH" ;; esac
for t in pjdfstest fsx; do
    command -v "$t" >/dev/null || { echo "unprivileged.sh: $t missing (scripts/install-deps.sh)"; exit 1; }
done
if ! id "$USER_NAME" >/dev/null 2>&1; then
    useradd --create-home --user-group --shell /bin/bash \
        --comment "uvfs unprivileged-mount tests" "$USER_NAME" || exit 1
fi
# The second dummy user pjdfstest.sh wants (it creates it only as root).
if ! id tests >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir / \
        --shell /usr/sbin/nologin --comment "Dummy user for pjdfstest" tests || exit 1
fi
if [ -z "${UVFS_BIN:-}" ]; then
    cargo build --release -p uvfs-cli || exit 1
    UVFS_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/uvfs
fi
# What the user runs, where the user can read it (the checkout and root's
# cargo bin may not be).
STAGE=$(mktemp -d /tmp/uvfs-unpriv-stage.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
mkdir "$STAGE/bin"
cp "$UVFS_BIN" "$STAGE/bin/uvfs"
cp "$(command -v pjdfstest)" "$(command -v fsx)" "$STAGE/bin/"
cp "$ROOT/scripts/pjdfstest.sh" "$ROOT/scripts/fsx.sh" "$STAGE/bin/"
cp "$0" "$STAGE/bin/unprivileged.sh"
chmod 755 "$STAGE" "$STAGE/bin" "$STAGE"/bin/*
host_before=$(stat -c '%a %t:%T' /dev/fuse)
unshare --mount --propagation private bash "$STAGE/bin/unprivileged.sh" --in-namespace "$STAGE"
rc=$?
host_after=$(stat -c '%a %t:%T' /dev/fuse)
if [ "$host_before" != "$host_after" ]; then
    echo "FAIL: the host's /dev/fuse changed: $host_before -> $host_after"; rc=1
fi
if [ $rc = 0 ]; then echo "unprivileged.sh: all passed"; else echo "unprivileged.sh: FAILED"; fi
exit $rc
