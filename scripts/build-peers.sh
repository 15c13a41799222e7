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
# cargo and crates.io for fbr-passthrough, and for gofuse-loopback a go
# command (on PATH, else /usr/local/go/bin/go; install-deps.sh installs
# Debian's golang-go where there is none): where it is older than the
# peer's go.mod asks, Go $UVFS_GO_TOOLCHAIN (default go1.27.3) is
# downloaded through the Go module proxy into $OUT/go-toolchain once.
# Exits non-zero if a requested peer cannot be built, after trying every one.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
OUT="$CARGO_TARGET_DIR/peers"
LL_SRC_DIR=${LL_SRC_DIR:-/usr/share/doc/libfuse3-dev/examples}
# The Go release fetched when the system's Go is too old for gofuse-loopback.
GO_TOOLCHAIN=${UVFS_GO_TOOLCHAIN:-go1.27.3}
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

# True when dotted version $1 is at least $2.
version_ge() {
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

# A Go of $GO_TOOLCHAIN's release, for when the system's is older than the
# peer's go.mod asks (Debian 12 ships 1.19). The Go module proxy serves
# each Go release as the module golang.org/toolchain; any go command, also
# one from before GOTOOLCHAIN existed, downloads it through the proxy set
# in `go env GOPROXY` and checks it against the checksum database like any
# module. It goes into a module cache of its own under $OUT, made
# executable as the go command does when it switches toolchains itself.
# Prints the new go's path.
fetch_go() {
    local old=$1 cache="$OUT/go-toolchain" os arch mod dir
    os=$(GOTOOLCHAIN=local "$old" env GOHOSTOS) || return 1
    arch=$(GOTOOLCHAIN=local "$old" env GOHOSTARCH) || return 1
    mod="golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.$os-$arch"
    dir="$cache/$mod"
    if [ ! -x "$dir/bin/go" ]; then
        echo "build-peers: downloading Go $GO_TOOLCHAIN (module $mod, about 80 MB)" >&2
        # Outside any module, so no go.mod is read or changed.
        (cd / && GOTOOLCHAIN=local GOMODCACHE="$cache" GOFLAGS=-modcacherw \
            "$old" mod download "$mod") >&2 || return 1
        chmod -R u+w "$dir" && chmod a+x "$dir"/bin/* "$dir"/pkg/tool/*/* || return 1
        rm -rf "$cache/cache" # the downloaded zip, unpacked in $dir
    fi
    echo "$dir/bin/go"
}

build_gofuse() {
    local dir="$ROOT/peers/gofuse-loopback" bin="$OUT/gofuse-loopback" go ver need
    if up_to_date "$bin" "$dir/main.go" "$dir/go.mod" "$dir/go.sum" "$0"; then
        echo "build-peers: gofuse-loopback up to date ($bin)"
        return 0
    fi
    go=$(find_go) || {
        echo "build-peers: no go command (apt-get install golang-go)" >&2
        return 1
    }
    # GOTOOLCHAIN=local: the go command never switches toolchains by
    # itself here; an older one is replaced by fetch_go, in the open.
    need=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$dir/go.mod")
    ver=$(GOTOOLCHAIN=local "$go" env GOVERSION 2>/dev/null) || ver=""
    if ! version_ge "${ver#go}" "$need"; then
        echo "build-peers: $go is ${ver:-of unknown version}; gofuse-loopback needs Go $need or later" >&2
        go=$(fetch_go "$go") || {
            echo "build-peers: could not download Go $GO_TOOLCHAIN; install Go $need or later" >&2
            return 1
        }
        ver=$(GOTOOLCHAIN=local "$go" env GOVERSION) || return 1
    fi
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
