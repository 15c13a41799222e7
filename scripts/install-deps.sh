#!/usr/bin/env bash
# Install everything uvfs needs to build, lint and run its conformance tests.
#
# Idempotent and fast when everything is already present: every step checks
# first and only installs what is missing.  Safe to run directly or to source
# (it only defines/exports PATH additions; errors are handled in a subshell-free
# way compatible with `set -euo pipefail` callers).
#
#   Debian:  fuse3 libfuse3-dev libacl1-dev stress-ng pkg-config, git sqlite3
#            (what `uvfs bench devwork` runs on each file system), librsvg2-bin
#            (rsvg-convert, for the chart render test), python3 (the mount
#            tests' mmap and ACL helpers, scripts/tsan.sh), and
#            golang-go where no Go is installed (for the go-fuse peer;
#            where that Go is older than the peer asks, as Debian 12's 1.19
#            is, build-peers.sh downloads a newer one through the Go
#            module proxy)
#   rustup:  rustfmt, clippy (stable)
#   cargo:   pjdfstest 0.2.x, fsx 0.3.x   (cargo install --locked)
#   users:   "tests", the dummy user pjdfstest switches to besides "nobody"
#            (as root only; pjdfstest refuses to start without it)
#   kernel:  FUSE over io_uring turned on (the `fuse` module's enable_uring,
#            Linux 6.14+; as root, where the parameter exists), so `uvfs
#            mount` serves through it and the conformance runs test it
#            (UVFS_KEEP_URING_OFF=1 leaves it as it is)
#   peers:   scripts/build-peers.sh (the FUSE servers `uvfs bench fuse-stat`
#            compares with; well under a second once built). Never fails
#            this script: the benchmark builds a missing peer itself, and
#            reports one that cannot be built.
#
# Env:
#   UVFS_SKIP_CARGO_TOOLS=1   don't install pjdfstest/fsx
#   UVFS_SKIP_PEERS=1         don't build the benchmark peers
#   PJDFSTEST_VERSION, FSX_VERSION   version requirements (default ^0.2, ^0.3)

_uvfs_install_deps() {
    local start=$SECONDS
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi

    # cargo-installed binaries live here; make sure they are on PATH.
    local cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
    case ":$PATH:" in
        *":$cargo_bin:"*) ;;
        *) export PATH="$cargo_bin:$PATH" ;;
    esac

    # ---- Debian packages -------------------------------------------------
    # e2fsprogs: lsattr, for the inode-flag mount tests; librsvg2-bin:
    # rsvg-convert, for the chart render test; python3: the mount tests'
    # mmap and ACL helpers, the module-cycle check and the conformance
    # scripts (a minimal Debian has no Python).
    local pkgs=(fuse3 libfuse3-dev libacl1-dev stress-ng pkg-config git sqlite3 librsvg2-bin e2fsprogs python3)
    if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
        pkgs+=(golang-go)
    fi
    local missing=() p
    for p in "${pkgs[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
            missing+=("$p")
        fi
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "install-deps: apt-get installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "install-deps: Debian packages present"
    fi

    # ---- rustup components ----------------------------------------------
    if command -v rustup >/dev/null 2>&1; then
        local comps=() c installed
        installed="$(rustup component list --installed --toolchain stable 2>/dev/null || true)"
        for c in rustfmt clippy; do
            if ! grep -q "^$c" <<<"$installed"; then
                comps+=("$c")
            fi
        done
        if [ "${#comps[@]}" -gt 0 ]; then
            echo "install-deps: rustup component add ${comps[*]}"
            rustup component add --toolchain stable "${comps[@]}"
        else
            echo "install-deps: rustfmt, clippy present"
        fi
    else
        echo "install-deps: WARNING: rustup not found; assuming rustfmt/clippy are available" >&2
    fi

    # ---- cargo-installed test tools --------------------------------------
    if [ "${UVFS_SKIP_CARGO_TOOLS:-0}" != 1 ]; then
        local t0
        if ! command -v pjdfstest >/dev/null 2>&1; then
            echo "install-deps: cargo install --locked pjdfstest"
            t0=$SECONDS
            cargo install --locked --quiet pjdfstest --version "${PJDFSTEST_VERSION:-^0.2}"
            echo "install-deps: pjdfstest installed in $((SECONDS - t0))s"
        fi
        if ! command -v fsx >/dev/null 2>&1; then
            echo "install-deps: cargo install --locked fsx"
            t0=$SECONDS
            cargo install --locked --quiet fsx --version "${FSX_VERSION:-^0.3}"
            echo "install-deps: fsx installed in $((SECONDS - t0))s"
        fi
        echo "install-deps: pjdfstest=$(command -v pjdfstest) fsx=$(command -v fsx)"
    fi

    # ---- pjdfstest's dummy user -----------------------------------------
    if ! id tests >/dev/null 2>&1; then
        if [ "$(id -u)" -eq 0 ]; then
            echo "install-deps: useradd tests (pjdfstest's dummy user)"
            useradd --system --user-group --no-create-home --home-dir / \
                --shell /usr/sbin/nologin --comment "Dummy user for pjdfstest" tests
        else
            echo "install-deps: WARNING: user 'tests' missing and not root; pjdfstest will not run" >&2
        fi
    fi

    # ---- FUSE over io_uring ----------------------------------------------
    local uring_param=/sys/module/fuse/parameters/enable_uring
    if [ "${UVFS_KEEP_URING_OFF:-0}" != 1 ] && [ -e "$uring_param" ]; then
        if [ "$(cat "$uring_param")" = Y ]; then
            :
        elif [ "$(id -u)" -eq 0 ] && echo Y > "$uring_param" 2>/dev/null; then
            echo "install-deps: FUSE over io_uring turned on ($uring_param = Y)"
        else
            echo "install-deps: WARNING: cannot turn on FUSE over io_uring ($uring_param); mounts use /dev/fuse" >&2
        fi
    fi

    # ---- benchmark peers -------------------------------------------------
    if [ "${UVFS_SKIP_PEERS:-0}" != 1 ]; then
        local peers_script t1=$SECONDS
        peers_script="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/build-peers.sh"
        if [ -f "$peers_script" ] && bash "$peers_script"; then
            echo "install-deps: benchmark peers ready in $((SECONDS - t1))s"
        else
            echo "install-deps: WARNING: benchmark peers not built (uvfs bench fuse-stat reports them as failed); continuing" >&2
        fi
    fi

    echo "install-deps: done in $((SECONDS - start))s"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    # Executed, not sourced.
    set -euo pipefail
    _uvfs_install_deps
else
    # Sourced: run it, keep PATH changes in the caller.
    _uvfs_install_deps
fi
