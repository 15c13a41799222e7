#!/usr/bin/env bash
# Run fsx (File System eXerciser, fsx-rs 0.3.x) on a directory: random
# read/write/mmap/truncate/... sequences, verifying data on every read.
#
# Usage: scripts/fsx.sh DIR
#
# Runs one fsx per seed, all at once, each on its own file DIR/fsx.<seed>
# (removed when it passes).  Prints one line per seed and a summary line
#     fsx: N passed, N failed
# and exits non-zero if any seed reported corruption, crashed or timed out.
# On failure the last lines of fsx's output are printed; the full log and fsx's
# artifacts (<file>.fsxgood = expected contents, <file>.fsxlog) are kept in
# FSX_ARTIFACTS.
#
# Environment:
#   FSX_SEEDS      seeds to run, space/comma separated (default "1 2 3")
#   FSX_NUMOPS     operations per seed (default 100000)
#   FSX_PROFILE    "default": fsx's built-in op mix (read, write, mapread,
#                  mapwrite, truncate); "full": also close/open, fsync,
#                  fdatasync, msync(MS_INVALIDATE), posix_fallocate, punch_hole,
#                  sendfile, posix_fadvise, copy_file_range (default "default")
#   FSX_CONFIG     fsx TOML config file to use instead of FSX_PROFILE
#                  (see fsx's doc/fsx.toml for the keys)
#   FSX_TIMEOUT    seconds per seed before fsx is killed (default 1200)
#   FSX_ARTIFACTS  directory for logs and failure artifacts (default: a new temp
#                  dir; must NOT be on the file system under test)
#   FSX_VERBOSE=1  pass -v to fsx (logs every operation)
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 2
}

[ $# -eq 1 ] || usage
case "$1" in -h|--help) usage ;; esac
dir="$1"
if [ ! -d "$dir" ]; then
    echo "fsx.sh: $dir: not a directory" >&2
    exit 2
fi
dir="$(cd "$dir" && pwd -P)"

cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
case ":$PATH:" in *":$cargo_bin:"*) ;; *) PATH="$cargo_bin:$PATH" ;; esac
if ! command -v fsx >/dev/null 2>&1; then
    echo "fsx.sh: fsx not found; run scripts/install-deps.sh" >&2
    exit 2
fi

seeds="${FSX_SEEDS:-1 2 3}"
seeds="${seeds//,/ }"
numops="${FSX_NUMOPS:-100000}"
timeout_s="${FSX_TIMEOUT:-1200}"
art="${FSX_ARTIFACTS:-$(mktemp -d "${TMPDIR:-/tmp}/fsx-sh.XXXXXX")}"
mkdir -p "$art"

cfg_args=()
if [ -n "${FSX_CONFIG:-}" ]; then
    cfg_args=(-f "$FSX_CONFIG")
else
    case "${FSX_PROFILE:-default}" in
        default) ;;
        full)
            cat >"$art/fsx-full.toml" <<'EOF'
[weights]
close_open = 1
read = 10
write = 10
mapread = 10
mapwrite = 10
invalidate = 1
truncate = 2
fsync = 1
fdatasync = 1
posix_fallocate = 1
punch_hole = 1
sendfile = 1
posix_fadvise = 1
copy_file_range = 1
EOF
            cfg_args=(-f "$art/fsx-full.toml")
            ;;
        *)
            echo "fsx.sh: unknown FSX_PROFILE '${FSX_PROFILE}' (default|full)" >&2
            exit 2
            ;;
    esac
fi
verbose_args=()
[ "${FSX_VERBOSE:-0}" = 1 ] && verbose_args=(-v)

echo "fsx.sh: $(fsx --version) on $dir ($(stat -f -c %T "$dir")): seeds [$seeds] x $numops ops, ${cfg_args[*]:-built-in op mix}, artifacts in $art"
# The seeds run at once, each on its own file: fsx waits on a FUSE round
# trip per operation far more than it computes, so on two cores three
# seeds take little longer than one, and the server gets concurrent I/O on
# top of each seed's sequence.
run_seed() {
    local seed="$1" file="$dir/fsx.$1" log="$art/fsx.$1.log" t0=$SECONDS rc=0
    rm -f "$file"
    timeout --kill-after=30 "$timeout_s" \
        fsx "${cfg_args[@]}" "${verbose_args[@]}" -N "$numops" -S "$seed" -P "$art" "$file" \
        >"$log" 2>&1 || rc=$?
    echo "$rc $((SECONDS - t0))" >"$art/fsx.$seed.rc"
}
pids=()
for seed in $seeds; do
    run_seed "$seed" &
    pids+=($!)
done
for pid in "${pids[@]}"; do
    wait "$pid" || true
done
passed=0
failed=0
for seed in $seeds; do
    file="$dir/fsx.$seed"
    log="$art/fsx.$seed.log"
    read -r rc dt <"$art/fsx.$seed.rc" || { rc=255; dt=0; }
    if [ "$rc" = 0 ] && grep -q 'All operations completed A-OK' "$log"; then
        echo "  seed $seed: ok (${dt}s)"
        passed=$((passed + 1))
        rm -f "$file" "$art/fsx.$seed.fsxgood" "$art/fsx.$seed.fsxlog" "$art/fsx.$seed.rc"
    else
        failed=$((failed + 1))
        case "$rc" in
            124|137) why="timed out after ${timeout_s}s" ;;
            1) why="data corruption or I/O error (exit 1)" ;;
            *) why="exit status $rc" ;;
        esac
        echo "  seed $seed: FAILED: $why (${dt}s); reproduce: fsx${cfg_args[*]:+ ${cfg_args[*]}} -N $numops -S $seed -P ARTIFACTS $file"
        # fsx prints its diagnosis (e.g. "READ BAD DATA", "Size error", a
        # hexdump of good vs bad bytes) and then a dump of the last ops.
        echo "  ---- diagnosis from $log ----"
        grep -v -E '^\[ERROR fsx\] +[0-9]+ ' "$log" | head -n 60 | sed 's/^/  | /' || true
        echo "  ---- last operations ----"
        grep -E '^\[ERROR fsx\] +[0-9]+ ' "$log" | tail -n 15 | sed 's/^/  | /' || true
        # keep $file and the artifacts for post-mortem
    fi
done

echo "fsx: $passed passed, $failed failed"
if [ "$failed" != 0 ]; then
    echo "fsx.sh: logs and artifacts kept in $art" >&2
    exit 1
fi
if [ -z "${FSX_ARTIFACTS:-}" ]; then
    rm -rf "$art"
fi
