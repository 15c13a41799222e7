#!/usr/bin/env bash
# fstests (xfstests), the Linux file-system test suite, on uvfs: its
# `generic` quick group on a passthrough mount and on memfs, each checked
# against an expected-failures list.
#
#   scripts/fstests.sh                          # both file systems, -g quick
#   FSTESTS_FS=memfs scripts/fstests.sh         # one of them
#   FSTESTS_TESTS="generic/001 generic/131" scripts/fstests.sh   # these tests only
#
# What it does:
#   1. installs the Debian packages fstests needs and the users and groups
#      its README names (fsgqa, fsgqa2, 123456-fsgqa, daemon);
#   2. builds fstests from ../shared/third_party/xfstests-63a2972.tar.gz
#      (CI reaches no git host) with scripts/fstests/*.patch applied, once,
#      into FSTESTS_CACHE/<hash of tarball and patches>; a later run reuses
#      the build until the tarball or a patch changes;
#   3. builds uvfs and, in a private mount namespace (so nothing here is
#      seen, or left, outside this script), puts it where mount(8) looks
#      for helpers, as /sbin/mount.fuse.uvfs and /sbin/mount.uvfs (an
#      overlay on /sbin with the two links; the host's /sbin is untouched);
#   4. runs `./check -g quick` with FSTYP=fuse, FUSE_SUBTYP=.uvfs, so each
#      test mounts as a user would: `mount -t fuse.uvfs NAME MNT -o ...`:
#        passthrough: TEST_DEV=uvfs-test and SCRATCH_DEV=uvfs-scratch are
#          the mounts' names (what findmnt shows, what `umount NAME`
#          finds); `-o source=DIR` names what they serve, a directory on
#          an ext4 file system on a loop image of its own (FSTESTS_IMAGE_SIZE),
#          so a test that fills the scratch file system fills that image,
#          not the host's disk;
#        memfs: the same names with `-o fs=memfs,size=FSTESTS_MEMFS_SIZE`.
#          memfs is volatile like tmpfs: its data lives in its server,
#          which ends at unmount. fstests knows that of tmpfs alone: its
#          _test_cycle_mount leaves a tmpfs test file system mounted and
#          _scratch_cycle_mount remounts a tmpfs scratch file system with
#          the test's options (`mount -o remount,OPTS`, which uvfs's helper
#          serves) instead of unmounting and mounting it again.
#          scripts/fstests/fuse-volatile.patch does the same for FSTYP=fuse
#          with FUSE_VOLATILE=yes, which the memfs run sets.
#      fstests compares the mounted type with FSTYP; the kernel shows uvfs
#      mounts as fuse.uvfs (so mount(8) finds mount.fuse.uvfs for a
#      remount), and scripts/fstests/fuse-subtype.patch maps
#      fuse$FUSE_SUBTYP to fuse, as fstests maps fuse.glusterfs and
#      fuse.ceph-fuse. Those two 4- and 2-line patches are the only changes
#      to fstests.
#      Left out: the tests of scripts/fstests/not-on-fuse.txt, which no
#      FUSE file system can run (reflinks, block devices, quotas, fscrypt,
#      shutdown, swap files, ...: 372 of the group's 633; each would cost a
#      second of set-up to say "not run").
#   5. compares each run with scripts/fstests/expected-failures-<fs>.txt
#      (one line per test: `generic/NNN  reason`). Any failure not on the
#      list fails the script (its .out.bad diff and .full tail are
#      printed); a listed test that passed is reported, so the list can
#      shrink. Results stay in FSTESTS_OUT/<fs>/ (check's log, each test's
#      output, the .notrun reasons, summary.txt).
#
# Needs root, /dev/fuse and loop devices.
#
# Environment:
#   FSTESTS_FS          file systems to run: "passthrough memfs" (default)
#   FSTESTS_GROUP       check's -g (default quick)
#   FSTESTS_TESTS       explicit tests instead of the group
#   FSTESTS_EXCLUDE     more tests to leave out (space separated)
#   FSTESTS_TIMEOUT     seconds a file system's whole run may take (default 2400)
#   FSTESTS_TARBALL     the fstests source (default ../shared/third_party/xfstests-63a2972.tar.gz)
#   FSTESTS_CACHE       build cache (default /var/tmp/uvfs-fstests; it must be
#                       reachable by the fsgqa user, so not under /root)
#   FSTESTS_OUT         results (default $CARGO_TARGET_DIR/fstests)
#   FSTESTS_IMAGE_SIZE  size of each ext4 image under the passthrough (default 8G, sparse)
#   FSTESTS_MEMFS_SIZE  memfs's size= for each of its two mounts (default 4g)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
FSTESTS_FS=${FSTESTS_FS:-"passthrough memfs"}
FSTESTS_GROUP=${FSTESTS_GROUP:-quick}
FSTESTS_TESTS=${FSTESTS_TESTS:-}
FSTESTS_EXCLUDE=${FSTESTS_EXCLUDE:-}
FSTESTS_TIMEOUT=${FSTESTS_TIMEOUT:-2400}
FSTESTS_TARBALL=${FSTESTS_TARBALL:-$ROOT/../shared/third_party/xfstests-63a2972.tar.gz}
FSTESTS_CACHE=${FSTESTS_CACHE:-/var/tmp/uvfs-fstests}
FSTESTS_OUT=${FSTESTS_OUT:-$CARGO_TARGET_DIR/fstests}
FSTESTS_IMAGE_SIZE=${FSTESTS_IMAGE_SIZE:-8G}
FSTESTS_MEMFS_SIZE=${FSTESTS_MEMFS_SIZE:-4g}
PATCHES=("$ROOT"/scripts/fstests/*.patch)
export CARGO_TARGET_DIR FSTESTS_FS FSTESTS_GROUP FSTESTS_TESTS FSTESTS_EXCLUDE \
    FSTESTS_TIMEOUT FSTESTS_OUT FSTESTS_IMAGE_SIZE FSTESTS_MEMFS_SIZE

# ---- inside the private mount namespace: the runs ---------------------------
if [ "${1:-}" = --in-namespace ]; then
    FST=$2
    UVFS=$3
    WORK=$(mktemp -d /var/tmp/uvfs-fstests-run.XXXXXX) || exit 1
    # fstests runs some programs as fsgqa, which must reach the mounts.
    chmod 755 "$WORK"
    cleanup() {
        local m
        for m in uvfs-test uvfs-scratch; do
            while findmnt -rn -S "$m" >/dev/null 2>&1; do umount "$m" 2>/dev/null || umount -l "$m" || break; done
        done
        for m in "$WORK"/ext4-*; do
            [ -d "$m" ] && { umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; }
        done
        rm -rf "$WORK"
    }
    trap cleanup EXIT

    # mount(8) runs /sbin/mount.fuse.uvfs for `-t fuse.uvfs`: an overlay
    # puts the two links over this namespace's /sbin.
    mkdir "$WORK/sbin"
    ln -s "$UVFS" "$WORK/sbin/mount.fuse.uvfs"
    ln -s "$UVFS" "$WORK/sbin/mount.uvfs"
    sbin=$(readlink -f /sbin)
    mount -t overlay uvfs-fstests-sbin -o "lowerdir=$WORK/sbin:$sbin" "$sbin" || exit 1

    failed=0
    summary=()
    for fs in $FSTESTS_FS; do
        out="$FSTESTS_OUT/$fs"
        rm -rf "$out"
        mkdir -p "$out" "$WORK/test" "$WORK/scratch"
        cfg="$WORK/$fs.config"
        case "$fs" in
            passthrough)
                for d in test scratch; do
                    img="$WORK/ext4-$d.img"
                    truncate -s "$FSTESTS_IMAGE_SIZE" "$img"
                    mkfs.ext4 -q -F "$img" || exit 1
                    mkdir -p "$WORK/ext4-$d"
                    # -o loop: the loop device goes with the unmount.
                    mount -o loop "$img" "$WORK/ext4-$d" || exit 1
                    mkdir -m 755 "$WORK/ext4-$d/src"
                done
                test_opts="-o source=$WORK/ext4-test/src"
                scratch_opts="-o source=$WORK/ext4-scratch/src"
                volatile=no
                ;;
            memfs)
                test_opts="-o fs=memfs,size=$FSTESTS_MEMFS_SIZE"
                scratch_opts="-o fs=memfs,size=$FSTESTS_MEMFS_SIZE"
                volatile=yes
                ;;
            *)
                echo "fstests.sh: unknown file system $fs (passthrough or memfs)" >&2
                exit 2
                ;;
        esac
        cat > "$cfg" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.uvfs
export FUSE_VOLATILE=$volatile
export TEST_DEV=uvfs-test
export TEST_DIR=$WORK/test
export SCRATCH_DEV=uvfs-scratch
export SCRATCH_MNT=$WORK/scratch
export TEST_FS_MOUNT_OPTS="$test_opts"
export MOUNT_OPTIONS="$scratch_opts"
export RESULT_BASE=$out/results
EOF
        args=(-R xunit)
        if [ -n "$FSTESTS_TESTS" ]; then
            # shellcheck disable=SC2206 # a list of test names
            args+=($FSTESTS_TESTS)
        else
            # Less the tests no FUSE file system can run (not-on-fuse.txt).
            args+=(-g "$FSTESTS_GROUP" -E "$ROOT/scripts/fstests/not-on-fuse.txt")
        fi
        # shellcheck disable=SC2206
        [ -n "$FSTESTS_EXCLUDE" ] && args+=(-e "$FSTESTS_EXCLUDE")
        echo "fstests: $fs: ./check ${args[*]} (config $cfg)"
        t0=$SECONDS
        (cd "$FST" && HOST_OPTIONS="$cfg" timeout -k 30 "$FSTESTS_TIMEOUT" ./check "${args[@]}") \
            > "$out/check.log" 2>&1
        rc=$?
        dt=$((SECONDS - t0))
        grep -E '^(Ran|Not run|Failures|Failed|Passed all)' "$out/check.log" > "$out/summary.txt"
        if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            echo "fstests: $fs: TIMEOUT after ${dt}s (FSTESTS_TIMEOUT=$FSTESTS_TIMEOUT); the log's end:"
            tail -20 "$out/check.log"
            failed=1
        fi
        python3 "$ROOT/scripts/fstests/classify.py" "$fs" "$out" \
            "$ROOT/scripts/fstests/expected-failures-$fs.txt" "$dt" || failed=1
        summary+=("$(tail -1 "$out/verdict.txt" 2>/dev/null || echo "$fs: no verdict")")
        # Whatever a test left mounted goes before the next run.
        for m in uvfs-test uvfs-scratch; do
            while findmnt -rn -S "$m" >/dev/null 2>&1; do umount "$m" 2>/dev/null || umount -l "$m" || break; done
        done
        for d in test scratch; do
            [ -d "$WORK/ext4-$d" ] && umount "$WORK/ext4-$d" && rm -rf "$WORK/ext4-$d" "$WORK/ext4-$d.img"
        done
    done
    echo "---- fstests ----"
    printf '  %s\n' "${summary[@]}"
    exit "$failed"
fi

# ---- outside: tools, users, the fstests build, uvfs --------------------------
if [ "$(id -u)" != 0 ] || [ ! -c /dev/fuse ]; then
    echo "fstests.sh needs root and /dev/fuse"; exit 1
fi
if [ ! -f "$FSTESTS_TARBALL" ]; then
    echo "fstests.sh: no fstests source at $FSTESTS_TARBALL (../shared/third_party beside the clone)" >&2
    exit 1
fi

# fstests' README ("Ubuntu or Debian"), less what the generic tests on a
# FUSE file system never use (lvm2, dump, the other file systems' tools).
pkgs=(acl attr automake autoconf bc dbench e2fsprogs fio gawk gcc indent libacl1-dev
    libaio-dev libattr1-dev libcap-dev libgdbm-dev libgdbm-compat-dev libtool libtool-bin
    liburing-dev make psmisc python3 quota sed sqlite3 uuid-dev uuid-runtime xfsprogs
    xfslibs-dev util-linux)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "fstests: apt-get installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        { echo "fstests: apt-get install failed" >&2; exit 1; }
fi
# The users and groups of fstests' README (daemon is Debian's own).
getent group fsgqa >/dev/null || groupadd fsgqa
id fsgqa >/dev/null 2>&1 || useradd -m -g fsgqa fsgqa
id fsgqa2 >/dev/null 2>&1 || useradd -m fsgqa2
id 123456-fsgqa >/dev/null 2>&1 || useradd -m --badname 123456-fsgqa 2>/dev/null ||
    useradd -m 123456-fsgqa
id daemon >/dev/null 2>&1 || useradd -r daemon

# The build, keyed by the tarball and the patches.
key=$(cat "$FSTESTS_TARBALL" "${PATCHES[@]}" | sha256sum | cut -c1-16)
FST="$FSTESTS_CACHE/$key"
mkdir -p "$FSTESTS_CACHE"
chmod 755 "$FSTESTS_CACHE"
(
    flock 9
    if [ ! -f "$FST/.built" ]; then
        t0=$SECONDS
        echo "fstests: building $(basename "$FSTESTS_TARBALL") + ${#PATCHES[@]} patches in $FST"
        # Older builds go: only one is ever used.
        find "$FSTESTS_CACHE" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
        mkdir -p "$FST" && tar -xzf "$FSTESTS_TARBALL" -C "$FST" || exit 1
        for p in "${PATCHES[@]}"; do
            patch -d "$FST" -p1 --quiet < "$p" || { echo "fstests: $p does not apply" >&2; exit 1; }
        done
        make -C "$FST" -j"$(nproc)" > "$FSTESTS_CACHE/build.log" 2>&1 ||
            { tail -30 "$FSTESTS_CACHE/build.log"; echo "fstests: build failed" >&2; exit 1; }
        touch "$FST/.built"
        echo "fstests: built in $((SECONDS - t0))s"
    else
        echo "fstests: using the build in $FST"
    fi
) 9> "$FSTESTS_CACHE/.lock" || exit 1

cargo build --release -p uvfs-cli || exit 1

exec unshare --mount --propagation private bash "$0" --in-namespace "$FST" "$CARGO_TARGET_DIR/release/uvfs"
