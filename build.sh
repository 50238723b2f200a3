#!/bin/sh
# build.sh builds the release binary: jail linked statically against musl
# and a musl build of libseccomp, instead of against glibc.
#
# Why musl: a static glibc program probes the CPU's caches with CPUID at
# every start (init_cacheinfo), and on a virtual machine every CPUID traps
# to the hypervisor. On the 2-core VMs jail is developed on, that is about
# 1 ms of every `jail run` (12.4 -> 11.3 ms for a strict /bin/true,
# interleaved; `jail version` 5.4 -> 3.8 ms); on a cloud VM it is less,
# but never nothing. The C stage the jail runs in is musl for the same
# reason (nsexec/stage/build.sh).
#
# libseccomp comes from its own source, at the release Debian 12 ships
# (what the tests run against), fetched through the Go module proxy
# (go mod download; its checksum database vouches for the archive, the
# hash below pins it, and a digest of the files compiled checks the module
# cache's copy), and is built once per machine into
# ${XDG_CACHE_HOME:-~/.cache}/jail-build: that cache is trusted as the Go
# module cache is (whoever can write either can change what is built).
# Nothing is installed.
#
# `go build ./cmd/jail` (glibc, libseccomp-dev) and `go install` still
# work, and so does the glibc static build README.md gave before: this
# script only makes the fastest binary.
#
# Usage: ./build.sh [-o OUT]   (default ./jail)
# Needs: go, musl-gcc (musl-tools), gperf, pkg-config, and the kernel's
# headers (linux-libc-dev, which libc6-dev pulls in).
set -eu
cd "$(dirname "$0")"

out=jail
while getopts o: opt; do
	case $opt in
	o) out=$OPTARG ;;
	*) echo "usage: $0 [-o OUT]" >&2; exit 2 ;;
	esac
done

libseccomp=2.5.4
libseccomp_sum='h1:AA+LXg5XBY5Cbnc8OjWOLgEWwYAoeGJxHw/vU/wANhw='
# The digest of the files compiled (sha256sum of each, sorted by name, then
# of that list): the module cache's copy is checked, not only the sum Go
# recorded when it downloaded the archive.
libseccomp_files_sum=b5d38ebe2420cb6f2f74b0e54c67b37307e2575f4aceb84745e7e75c9f84abd7
recipe=2 # bump when the way libseccomp is built below changes

for tool in go musl-gcc gperf pkg-config ar; do
	command -v "$tool" >/dev/null || {
		echo "build.sh: $tool not found (apt-get install -y gcc libc6-dev musl-tools gperf pkg-config)" >&2
		exit 1
	}
done
case $(go env GOARCH) in
amd64) triplet=x86_64-linux-gnu ;;
arm64) triplet=aarch64-linux-gnu ;;
*) echo "build.sh: no musl build for $(go env GOARCH)" >&2; exit 1 ;;
esac
[ -d "/usr/include/$triplet/asm" ] || { echo "build.sh: no kernel headers in /usr/include/$triplet/asm (apt-get install linux-libc-dev)" >&2; exit 1; }

cache=${JAIL_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jail-build}
prefix=$cache/libseccomp-$libseccomp-musl-$(go env GOARCH)-r$recipe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# musl's include path has no kernel headers: borrow the system's.
mkdir "$tmp/kinc"
ln -s /usr/include/linux "$tmp/kinc/linux"
ln -s /usr/include/asm-generic "$tmp/kinc/asm-generic"
ln -s "/usr/include/$triplet/asm" "$tmp/kinc/asm"

if [ ! -f "$prefix/lib/libseccomp.a" ]; then
	# Outside any module, so that nothing here is added to go.sum.
	json=$(cd "$tmp" && GOFLAGS= go mod download -json "github.com/seccomp/libseccomp@v$libseccomp+incompatible")
	src=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	sum=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",$/\1/p')
	if [ "$sum" != "$libseccomp_sum" ] || [ ! -d "$src/src" ]; then
		echo "build.sh: libseccomp $libseccomp: got $sum from the module proxy, want $libseccomp_sum" >&2
		exit 1
	fi
	files_sum=$(cd "$src" && ls src/*.c src/*.h src/syscalls.csv src/syscalls.perf.template src/arch-gperf-generate \
		include/seccomp.h.in include/seccomp-syscalls.h | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
	if [ "$files_sum" != "$libseccomp_files_sum" ]; then
		echo "build.sh: libseccomp $libseccomp in $src: its files' digest is $files_sum, want $libseccomp_files_sum (a changed module cache?)" >&2
		exit 1
	fi
	echo "build.sh: building libseccomp $libseccomp with musl into $prefix" >&2
	b=$tmp/libseccomp
	mkdir -p "$b/include" "$b/lib" "$b/pkgconfig" "$b/obj"
	cp "$src"/src/*.c "$src"/src/*.h "$src/src/syscalls.csv" "$src/src/syscalls.perf.template" "$b/obj/"
	chmod -R u+w "$b/obj"
	# What autoconf would write: the two facts the library's sources ask.
	printf '#define HAVE_LINUX_SECCOMP_H 1\n#define ENABLE_PYTHON 0\n' >"$b/obj/configure.h"
	sed -e "s/@VERSION_MAJOR@/${libseccomp%%.*}/" \
		-e "s/@VERSION_MINOR@/$(echo "$libseccomp" | cut -d. -f2)/" \
		-e "s/@VERSION_MICRO@/${libseccomp##*.}/" "$src/include/seccomp.h.in" >"$b/include/seccomp.h"
	cp "$src/include/seccomp-syscalls.h" "$b/include/"
	(
		cd "$b/obj"
		# The syscall table, as src/Makefile.am makes it.
		bash "$src/src/arch-gperf-generate" syscalls.csv syscalls.perf.template
		gperf -m 100 --null-strings --pic -tCEG -T -S1 syscalls.perf >syscalls.perf.c
		# src/Makefile.am's SOURCES_ALL, but the tools.
		for f in api system helper gen_pfc gen_bpf hash db arch arch-x86 arch-x86_64 arch-x32 arch-arm \
			arch-aarch64 arch-mips arch-mips64 arch-mips64n32 arch-parisc arch-parisc64 arch-ppc arch-ppc64 \
			arch-riscv64 arch-s390 arch-s390x syscalls syscalls.perf; do
			musl-gcc -O2 -fPIC -fvisibility=hidden -isystem "$tmp/kinc" -I"$b/include" -I. -c "$f.c" -o "$f.o"
		done
		ar rcs "$b/lib/libseccomp.a" ./*.o
	)
	printf 'Name: libseccomp\nDescription: libseccomp %s built with musl by jail'"'"'s build.sh\nVersion: %s\nCflags: -I%s/include\nLibs: -L%s/lib -lseccomp\n' \
		"$libseccomp" "$libseccomp" "$prefix" "$prefix" >"$b/pkgconfig/libseccomp.pc"
	rm -rf "$b/obj"
	mkdir -p "$cache"
	rm -rf "$prefix.tmp.$$"
	mv "$b" "$prefix.tmp.$$"
	# Another build may have won the race; its copy is as good.
	mv -T "$prefix.tmp.$$" "$prefix" 2>/dev/null || rm -rf "$prefix.tmp.$$"
fi

# -z stack-size: musl gives a thread 128 KiB unless the binary asks for
# more, and cgo runs C (libseccomp's compiler among it) on the stack of
# the thread it is called from; 8 MiB is glibc's default.
PKG_CONFIG_PATH=$prefix/pkgconfig CC=musl-gcc CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -isystem $tmp/kinc" \
	go build -tags osusergo,netgo \
	-ldflags '-linkmode external -extldflags "-static -Wl,-z,stack-size=8388608"' -o "$out" ./cmd/jail
echo "build.sh: $out: $(wc -c <"$out") bytes, static, musl, libseccomp $libseccomp" >&2
