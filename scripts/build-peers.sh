#!/usr/bin/env bash
# Builds the FUSE passthrough servers `uvfs bench fuse-stat` compares uvfs
# with, into $CARGO_TARGET_DIR/peers/ (default: target/peers/):
#
#   passthrough_ll   libfuse's low-level passthrough example, compiled from
#                    the source Debian's libfuse3-dev ships
#                    (/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c)
#   fbr-passthrough  fuse-backend-rs's PassthroughFs behind a small main
#                    (peers/fbr-passthrough, a standalone Cargo project;
#                    also the fuse-backend-rs-fh peer, with --file-handles)
#   gofuse-loopback  go-fuse's loopback file system behind a small main
#                    (peers/gofuse-loopback, a Go module whose go.mod and
#                    go.sum pin go-fuse), built with `go build` through the
#                    Go module proxy
#
#   scripts/build-peers.sh                     # all three
#   scripts/build-peers.sh passthrough_ll      # one (or fbr-passthrough, gofuse-loopback)
#
# Idempotent: a peer whose binary is newer than its sources is left alone,
# so a second run takes well under a second. Needs cc, pkg-config and
# libfuse3-dev (scripts/install-deps.sh installs them) for passthrough_ll,
# cargo and crates.io for fbr-passthrough, Go 1.21 or later (`go` on PATH,
# else /usr/local/go/bin/go; install-deps.sh installs Debian's golang-go
# where there is none) for gofuse-loopback. Exits non-zero if a requested
# peer cannot be built, after trying every one.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
OUT="$CARGO_TARGET_DIR/peers"
LL_SRC_DIR=${LL_SRC_DIR:-/usr/share/doc/libfuse3-dev/examples}
mkdir -p "$OUT" || exit 1

# True when $1 exists and no later argument is newer than it.
up_to_date() {
    local bin=$1 f
    shift
    [ -x "$bin" ] || return 1
    for f in "$@"; do
        [ "$f" -nt "$bin" ] && return 1
    done
    return 0
}

build_passthrough_ll() {
    local src="$LL_SRC_DIR/passthrough_ll.c" bin="$OUT/passthrough_ll"
    if [ ! -f "$src" ]; then
        # Some libfuse3-dev versions ship the examples compressed.
        if [ -f "$src.gz" ]; then
            mkdir -p "$OUT/libfuse-src"
            gunzip -c "$src.gz" > "$OUT/libfuse-src/passthrough_ll.c" || return 1
            [ -f "$LL_SRC_DIR/passthrough_helpers.h" ] && cp "$LL_SRC_DIR/passthrough_helpers.h" "$OUT/libfuse-src/"
            src="$OUT/libfuse-src/passthrough_ll.c"
        else
            echo "build-peers: $src not found (apt-get install libfuse3-dev)" >&2
            return 1
        fi
    fi
    if up_to_date "$bin" "$src" "$0"; then
        echo "build-peers: passthrough_ll up to date ($bin)"
        return 0
    fi
    local flags
    flags=$(pkg-config --cflags --libs fuse3) || {
        echo "build-peers: pkg-config knows no fuse3 (apt-get install pkg-config libfuse3-dev)" >&2
        return 1
    }
    # shellcheck disable=SC2086 # $flags is a list of compiler flags
    cc -O2 -g -Wall -o "$bin.tmp" "$src" $flags || return 1
    mv "$bin.tmp" "$bin"
    echo "build-peers: built $bin"
}

build_fbr() {
    local dir="$ROOT/peers/fbr-passthrough" bin="$OUT/fbr-passthrough"
    # cargo itself decides whether anything changed (a no-op build takes a
    # fraction of a second); its own target dir keeps the peer's
    # dependencies apart from the workspace's.
    cargo build --release --quiet --locked \
        --manifest-path "$dir/Cargo.toml" --target-dir "$OUT/fbr-build" || return 1
    local built="$OUT/fbr-build/release/fbr-passthrough"
    if ! up_to_date "$bin" "$built"; then
        cp "$built" "$bin.tmp" && mv "$bin.tmp" "$bin" || return 1
        echo "build-peers: built $bin"
    else
        echo "build-peers: fbr-passthrough up to date ($bin)"
    fi
}

# The go command: on PATH, else where the official tarball puts it.
find_go() {
    if command -v go >/dev/null 2>&1; then
        command -v go
    elif [ -x /usr/local/go/bin/go ]; then
        echo /usr/local/go/bin/go
    else
        return 1
    fi
}

build_gofuse() {
    local dir="$ROOT/peers/gofuse-loopback" bin="$OUT/gofuse-loopback" go ver
    if up_to_date "$bin" "$dir/main.go" "$dir/go.mod" "$dir/go.sum" "$0"; then
        echo "build-peers: gofuse-loopback up to date ($bin)"
        return 0
    fi
    go=$(find_go) || {
        echo "build-peers: no go command (apt-get install golang-go)" >&2
        return 1
    }
    # go-fuse needs Go 1.21 (min, max, clear); an older go would fail deep
    # in its sources, so say it plainly. GOTOOLCHAIN=local: never fetch a
    # newer toolchain behind our back.
    ver=$(GOTOOLCHAIN=local "$go" env GOVERSION 2>/dev/null) || ver=""
    case "$ver" in
        go1.1[0-9]* | go1.[0-9] | go1.[0-9].* | go1.20*)
            echo "build-peers: $go is $ver; gofuse-loopback needs Go 1.21 or later" >&2
            return 1
            ;;
    esac
    (cd "$dir" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly "$go" build -trimpath -o "$bin.tmp" .) || return 1
    mv "$bin.tmp" "$bin"
    echo "build-peers: built $bin ($ver)"
}

want=("$@")
[ "${#want[@]}" -gt 0 ] || want=(passthrough_ll fbr-passthrough gofuse-loopback)
failed=()
for p in "${want[@]}"; do
    case "$p" in
        passthrough_ll | libfuse-passthrough_ll) build_passthrough_ll || failed+=("passthrough_ll") ;;
        fbr-passthrough | fuse-backend-rs | fuse-backend-rs-fh) build_fbr || failed+=("fbr-passthrough") ;;
        gofuse-loopback | go-fuse-loopback) build_gofuse || failed+=("gofuse-loopback") ;;
        *) echo "build-peers: unknown peer $p (passthrough_ll, fbr-passthrough, gofuse-loopback)" >&2; failed+=("$p") ;;
    esac
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "build-peers: FAILED: ${failed[*]}" >&2
    exit 1
fi
