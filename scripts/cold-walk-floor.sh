#!/usr/bin/env bash
# The least CPU any passthrough server can spend per entry of a cold walk:
# a C program does only what such a server must (getdents64 on each
# directory, statx of each entry by name, openat of subdirectories, no
# paths built, nothing else) over a tree shaped like `uvfs bench fuse-stat
# --files 15000` (150 directories of 100 files) on the native file system,
# after dropping every cache, and prints CPU and wall time per entry.
# Add what the walkers' side of the FUSE client costs per entry (the
# fuse-stat rows' walker_cpu_us_per_stat) to get the floor of a two-walker
# cold walk on 2 cores: issue 5's "1.2x the best peer" at T=2 needs the
# sum under 2 cores / (1.2 x the peer's rate).
#
#   scripts/cold-walk-floor.sh [DIR]     # default: a fresh dir under /tmp
#
# Needs root (drop_caches) and cc. Runs 3 cold passes and a warm one.
set -euo pipefail

base=${1:-/tmp}
work=$(mktemp -d "$base/uvfs-cold-floor.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat >"$work/floor.c" <<'C'
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
struct d64 { unsigned long long ino; long long off; unsigned short reclen; unsigned char type; char name[]; };
static long n;
static void walk(int dfd) {
    char buf[32768];
    long r;
    while ((r = syscall(SYS_getdents64, dfd, buf, sizeof buf)) > 0) {
        for (long o = 0; o < r;) {
            struct d64 *d = (void *)(buf + o);
            o += d->reclen;
            if (!strcmp(d->name, ".") || !strcmp(d->name, "..")) continue;
            struct statx st;
            statx(dfd, d->name, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &st);
            n++;
            if (d->type == DT_DIR) {
                int c = openat(dfd, d->name, O_RDONLY | O_DIRECTORY);
                walk(c);
                close(c);
            }
        }
    }
}
static double secs(struct timeval t) { return t.tv_sec + t.tv_usec * 1e-6; }
int main(int argc, char **argv) {
    struct rusage a, b;
    struct timespec t0, t1;
    getrusage(RUSAGE_SELF, &a);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int fd = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (fd < 0) { perror(argv[1]); return 1; }
    walk(fd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    getrusage(RUSAGE_SELF, &b);
    double cpu = secs(b.ru_utime) - secs(a.ru_utime) + secs(b.ru_stime) - secs(a.ru_stime);
    double wall = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("%ld entries: CPU %.2f us per entry, wall %.2f us per entry\n", n, cpu * 1e6 / n, wall * 1e6 / n);
    return 0;
}
C
cc -O2 -o "$work/floor" "$work/floor.c"
mkdir "$work/tree"
for d in $(seq 0 149); do
    mkdir "$work/tree/d$d"
    (cd "$work/tree/d$d" && touch $(seq -f "f%g" 0 99))
done
for i in 1 2 3; do
    sync
    echo 3 >/proc/sys/vm/drop_caches
    printf 'cold %s: ' "$i"
    "$work/floor" "$work/tree"
done
printf 'warm:   '
"$work/floor" "$work/tree"
