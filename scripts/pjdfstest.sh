#!/usr/bin/env bash
# Run the pjdfstest POSIX conformance suite (Rust rewrite, 0.2.x) on a directory.
#
# Usage: scripts/pjdfstest.sh MOUNTPOINT [TEST_PATTERN...]
#
#   MOUNTPOINT     directory on the file system under test (e.g. a uvfs FUSE
#                  mount).  pjdfstest creates a temporary directory inside it and
#                  removes it afterwards.
#   TEST_PATTERN   optional substring filters on test names (e.g. "chmod",
#                  "rename::"); see `pjdfstest --help`.
#
# Prints every failing test with its message, every skipped test with the reason,
# then a summary line
#     pjdfstest: N passed, N failed, N skipped
# and exits non-zero if any test failed (or passed when expected to fail), or if
# pjdfstest itself crashed/timed out.
#
# Should run as root: ~40% of the suite (chown, permission checks with switched
# users, mknod of devices, ...) is skipped otherwise.  Needs the dummy user
# "tests" (created here when running as root) and "nobody".
#
# Environment:
#   PJDFSTEST_CONFIG            use this TOML config as-is (the variables below
#                               that shape the generated config are then ignored)
#   PJDFSTEST_FEATURES          opt-in features, space/comma separated
#                               (default: "posix_fallocate utime_now utimensat rename_ctime";
#                               list all with `pjdfstest -l`)
#   PJDFSTEST_NAPTIME           seconds between timestamp-changing ops (default 0.01)
#   PJDFSTEST_ALLOW_REMOUNT=1   also run the EROFS tests (in a second pjdfstest
#                               process, see below), which `mount -o remount,ro`
#                               the file system holding MOUNTPOINT; needs root.
#                               Default 0: they are skipped.  Only without
#                               TEST_PATTERNs.
#   PJDFSTEST_EXPECTED_FAILURES test names, space/comma separated, whose failure
#                               is tolerated (reported as "failed as expected")
#   PJDFSTEST_SECONDARY_FS      directory on a *different* file system, for the EXDEV
#                               tests of link/rename; default: a temp dir under /tmp
#                               or /dev/shm, whichever is another device; "none" skips them
#   PJDFSTEST_TIMEOUT           seconds before the run is killed (default 900)
#   PJDFSTEST_LOG               where to keep pjdfstest's full output (default: temp
#                               file; the EROFS run goes to ${PJDFSTEST_LOG%.log}-erofs.log)
#   PJDFSTEST_VERBOSE=1         also print the full output
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 2
}

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
mnt="$1"
shift

if [ ! -d "$mnt" ]; then
    echo "pjdfstest.sh: $mnt: not a directory" >&2
    exit 2
fi
mnt="$(cd "$mnt" && pwd -P)"

cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
case ":$PATH:" in *":$cargo_bin:"*) ;; *) PATH="$cargo_bin:$PATH" ;; esac
if ! command -v pjdfstest >/dev/null 2>&1; then
    echo "pjdfstest.sh: pjdfstest not found; run scripts/install-deps.sh" >&2
    exit 2
fi

workdir="$(mktemp -d "${TMPDIR:-/tmp}/pjdfstest-sh.XXXXXX")"
secondary=""
cleanup() {
    [ -n "$secondary" ] && [ "${secondary_owned:-0}" = 1 ] && rm -rf "$secondary"
    rm -rf "$workdir"
}
trap cleanup EXIT

is_root=0
[ "$(id -u)" -eq 0 ] && is_root=1

# ---- dummy users -----------------------------------------------------------
if ! id tests >/dev/null 2>&1; then
    if [ "$is_root" = 1 ]; then
        useradd --system --user-group --no-create-home --home-dir / \
            --shell /usr/sbin/nologin --comment "Dummy user for pjdfstest" tests
    else
        echo "pjdfstest.sh: user 'tests' missing; run once as root to create it" >&2
        exit 2
    fi
fi
if [ "$is_root" != 1 ]; then
    echo "pjdfstest.sh: WARNING: not root; tests needing root will be skipped" >&2
fi

# ---- configuration ---------------------------------------------------------
if [ -n "${PJDFSTEST_CONFIG:-}" ]; then
    config="$PJDFSTEST_CONFIG"
else
    config="$workdir/pjdfstest.toml"
    features="${PJDFSTEST_FEATURES-posix_fallocate utime_now utimensat rename_ctime}"
    {
        echo "[features]"
        for f in ${features//,/ }; do
            echo "$f = {}"
        done
        echo
        echo "[settings]"
        echo "naptime = ${PJDFSTEST_NAPTIME:-0.01}"
        # (PJDFSTEST_ALLOW_REMOUNT turns this on for the EROFS run below)
        echo "allow_remount = false"
        printf 'expected_failures = ['
        sep=""
        xf="${PJDFSTEST_EXPECTED_FAILURES:-}"
        for t in ${xf//,/ }; do
            printf '%s"%s"' "$sep" "$t"
            sep=", "
        done
        echo "]"
        echo
        echo "[dummy_auth]"
        echo "entries = [[\"nobody\", \"$(id -gn nobody)\"], [\"tests\", \"$(id -gn tests)\"]]"
    } >"$config"
fi

# ---- secondary file system for EXDEV tests ---------------------------------
sec_args=()
if [ "${PJDFSTEST_SECONDARY_FS:-}" = none ]; then
    :
elif [ -n "${PJDFSTEST_SECONDARY_FS:-}" ]; then
    sec_args=(-s "$PJDFSTEST_SECONDARY_FS")
else
    mdev="$(stat -c %d "$mnt")"
    for base in "${TMPDIR:-/tmp}" /tmp /var/tmp /dev/shm; do
        if [ -d "$base" ] && [ -w "$base" ] && [ "$(stat -c %d "$base")" != "$mdev" ]; then
            secondary="$(mktemp -d "$base/pjdfstest-secondary.XXXXXX")"
            secondary_owned=1
            sec_args=(-s "$secondary")
            break
        fi
    done
fi

# ---- run -------------------------------------------------------------------
# run_pjd LOG CONFIG [ARGS...]: one pjdfstest process; its exit status.
run_pjd() {
    local log="$1" cfg="$2"
    shift 2
    # Backtraces point into pjdfstest's own code and only bloat the log.
    ( cd "$mnt" &&
      export RUST_BACKTRACE="${PJDFSTEST_BACKTRACE:-0}" RUST_LIB_BACKTRACE="${PJDFSTEST_BACKTRACE:-0}" &&
      exec timeout --kill-after=30 "${PJDFSTEST_TIMEOUT:-900}" \
          pjdfstest -c "$cfg" -p "$mnt" "${sec_args[@]}" "$@" ) >"$log" 2>&1
}

# set_remount IN OUT true|false: copy a config with allow_remount forced.
set_remount() {
    if grep -qE '^[[:space:]]*allow_remount[[:space:]]*=' "$1"; then
        sed -E "s/^[[:space:]]*allow_remount[[:space:]]*=.*/allow_remount = $3/" "$1" >"$2"
    elif grep -qE '^\[settings\][[:space:]]*$' "$1"; then
        sed -E "s/^\[settings\][[:space:]]*\$/[settings]\nallow_remount = $3/" "$1" >"$2"
    else
        { cat "$1"; printf '\n[settings]\nallow_remount = %s\n' "$3"; } >"$2"
    fi
}

# EROFS tests: pjdfstest 0.2.2 keeps descriptors of deleted files open for
# writing from earlier tests, so a read-only remount fails with EBUSY late in
# a full run.  So they run in a fresh process of their own.  They remount with
# mount(8), which for FUSE would call the mount.fuse3 helper (which cannot
# remount); a wrapper adds -i so mount(2) is used directly.
remount=0
if [ "${PJDFSTEST_ALLOW_REMOUNT:-0}" = 1 ]; then
    remount=1
    mkdir -p "$workdir/bin"
    printf '#!/bin/sh\nexec %s -i "$@"\n' "$(command -v mount)" >"$workdir/bin/mount"
    chmod +x "$workdir/bin/mount"
    erofs_config="$workdir/pjdfstest-erofs.toml"
    set_remount "$config" "$erofs_config" true
fi

log="${PJDFSTEST_LOG:-$workdir/pjdfstest.log}"
logs=("$log")
echo "pjdfstest.sh: $(pjdfstest --version) on $mnt ($(stat -f -c %T "$mnt")), config $config${sec_args[*]:+, secondary fs ${sec_args[1]}}"
rcs=()
rc=0
if [ "$remount" = 1 ] && [ $# -gt 0 ]; then
    # filtered run: one process, remounts allowed
    PATH="$workdir/bin:$PATH" run_pjd "$log" "$erofs_config" "$@" || rc=$?
    rcs+=("$rc")
else
    main_config="$config"
    if [ "$remount" = 1 ]; then
        main_config="$workdir/pjdfstest-main.toml"
        set_remount "$config" "$main_config" false
    fi
    run_pjd "$log" "$main_config" "$@" || rc=$?
    rcs+=("$rc")
    if [ "$remount" = 1 ]; then
        elog="${log%.log}-erofs.log"
        [ "$elog" = "$log" ] && elog="$log.erofs"
        logs+=("$elog")
        rc=0
        PATH="$workdir/bin:$PATH" run_pjd "$elog" "$erofs_config" erofs || rc=$?
        rcs+=("$rc")
    fi
fi

if [ "${PJDFSTEST_VERBOSE:-0}" = 1 ]; then
    cat "${logs[@]}"
fi

# Every run must have finished (printed its summary).
crashed=0
for i in "${!logs[@]}"; do
    if ! grep -qE '^Summary: ' "${logs[$i]}"; then
        crashed=1
        echo "pjdfstest.sh: pjdfstest exited with status ${rcs[$i]} and printed no summary; last output of ${logs[$i]}:" >&2
        tail -n 40 "${logs[$i]}" >&2
        [ "${rcs[$i]}" = 124 ] && echo "pjdfstest.sh: timed out after ${PJDFSTEST_TIMEOUT:-900}s" >&2
    fi
done

# Test result lines look like "<name><spaces><status>", followed by
# tab-indented detail lines (skip reasons, panic messages) and, with
# RUST_BACKTRACE, backtraces.  A test's last result wins (EROFS run after the
# main run).  Prints the non-passing tests, then "passed failed skipped xfail".
counts="$workdir/counts"
awk -v counts="$counts" '
    function flush() {
        if (cur != "") { det[cur] = detail }
        cur = ""; detail = ""
    }
    /^[^ \t][^ \t]*  +(ok|FAILED|skipped|PASSED UNEXPECTEDLY|failed as expected)$/ {
        flush()
        inbt = 0
        name = $1
        status = $0; sub(/^[^ \t]+ +/, "", status)
        if (status == "ok") k = "PASS"
        else if (status == "FAILED") k = "FAIL"
        else if (status == "skipped") k = "SKIP"
        else if (status == "PASSED UNEXPECTEDLY") k = "XPASS"
        else k = "XFAIL"
        if (!(name in kind)) order[n++] = name
        kind[name] = k
        cur = name
        next
    }
    /^(Stack backtrace:|Backtrace:)/ { inbt = 1; next }
    /^Summary:/ { flush(); next }
    /^[ \t]*$/ { next }
    {
        # tab-indented details, or continuation lines of multi-line panics
        if (cur != "" && !inbt) {
            line = $0; sub(/^[ \t]+/, "", line)
            detail = (detail == "" ? line : detail ($0 ~ /^\t/ ? "; " : " ") line)
        }
    }
    END {
        flush()
        for (i = 0; i < n; i++) {
            t = order[i]; k = kind[t]
            if (k == "PASS") { p++; continue }
            if (k == "FAIL" || k == "XPASS") f++
            else if (k == "SKIP") s++
            else x++
            printf "  %-6s %s%s\n", k, t, (det[t] != "" ? ": " det[t] : "")
        }
        print p + 0, f + 0, s + 0, x + 0 > counts
    }
' "${logs[@]}"
read -r passed failed skipped xfail <"$counts"

if [ "$xfail" != 0 ]; then
    echo "pjdfstest.sh: $xfail expected failure(s) tolerated (PJDFSTEST_EXPECTED_FAILURES)"
fi
if [ "$crashed" = 1 ]; then
    failed=$((failed + 1))
fi
echo "pjdfstest: $passed passed, $failed failed, $skipped skipped"
if [ "$failed" != 0 ]; then
    exit 1
fi
for r in "${rcs[@]}"; do
    if [ "$r" != 0 ]; then
        echo "pjdfstest.sh: pjdfstest exited with status $r" >&2
        exit 1
    fi
done
