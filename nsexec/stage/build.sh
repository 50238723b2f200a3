#!/bin/sh
# build.sh links the C stage (the nsexec/*.c files but the host-side
# spawn.c, and main.c) into a small static binary with musl, and records
# the digest of the sources it was built from. nsexec embeds the binary and
# runs it, from a sealed memfd, in place of re-executing the whole Go
# program: a 70 KB musl binary starts in a tenth of the time of the static
# glibc one (no CPUID probing, no relocations, a few pages).
#
# The build is reproducible: CI rebuilds it and compares it with the
# committed file, and TestStageUpToDate fails when a source changed since.
#
# -Os, not -O2: the stage's time is its system calls, and its text is
# what its PID 1 keeps mapped (the memfd's pages, brought in by
# fault-around, count to its PSS). At 51f3674, 300 interleaved rounds of
# a strict /bin/true: -Os 8.40 ms, -O2 8.69 ms; PID 1 120 KiB PSS against
# 124-132; the binary 79,352 bytes against 87,544.
#
# Usage: go generate ./nsexec   (needs musl-gcc: apt-get install musl-tools)
set -eu
cd "$(dirname "$0")/.."
arch=$(go env GOARCH)
case "$arch" in
amd64) triplet=x86_64-linux-gnu ;;
*) echo "build.sh: no embedded stage for $arch; jail re-executes itself there" >&2; exit 0 ;;
esac
command -v musl-gcc >/dev/null || { echo "build.sh: musl-gcc not found (apt-get install musl-tools)" >&2; exit 1; }
inc=$(mktemp -d)
trap 'rm -rf "$inc"' EXIT
# musl's include path has no kernel headers: borrow the system's.
ln -s /usr/include/linux "$inc/linux"
ln -s /usr/include/asm-generic "$inc/asm-generic"
ln -s "/usr/include/$triplet/asm" "$inc/asm"
srcs=$(ls decode.c join.c mount.c nsexec.c seccomp.c session.c workload.c stage/main.c)
musl-gcc -static -Os -std=gnu11 -Wall -Wextra -Werror -DJAIL_STAGE_MAIN -isystem "$inc" \
	-ffile-prefix-map="$PWD"=. -Wl,--build-id=none \
	-o "stage_linux_$arch.bin.tmp" $srcs -lpthread
strip --strip-all "stage_linux_$arch.bin.tmp"
mv "stage_linux_$arch.bin.tmp" "stage_linux_$arch.bin"
# What it was built from: every C file and header the stage compiles.
sha256sum $srcs nsexec.h stage.h > "stage_linux_$arch.sources"
echo "build.sh: stage_linux_$arch.bin: $(wc -c < "stage_linux_$arch.bin") bytes" >&2
