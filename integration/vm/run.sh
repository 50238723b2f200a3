#!/usr/bin/env bash
# Usage: integration/vm/run.sh [--timeout SECS] [--mem SIZE] [--cpus N] FILE... -- COMMAND [ARGS...]
#
# Runs COMMAND as root in a throwaway Linux VM whose only cgroup hierarchy is
# cgroup v2, with every controller enabled in the root's cgroup.subtree_control.
# Each FILE (a file or a directory) is copied into /jail-it in the guest under
# its basename, with its exec bits and made readable by every user; COMMAND
# runs there (cwd /jail-it, stdin /dev/null) and its stdout and stderr,
# merged, stream to this script's stdout.
#
#   --timeout SECS  give up on the VM after SECS seconds (default 900)
#   --mem SIZE      guest RAM, qemu syntax: 2G, 512M (default 2G); the guest's
#                   disk is its RAM
#   --cpus N        guest CPUs (default 2)
#
# Exit status: COMMAND's, or
#   99  infrastructure failure: qemu missing, download or build failed, the
#       VM did not report COMMAND's status before the timeout or died; one
#       line on stderr says which (after the tail of the VM console)
#    2  usage error
#   130/143  interrupted (SIGINT/SIGTERM)
#
# Environment:
#   JAIL_VM_CACHE    cache dir (default ${XDG_CACHE_HOME:-$HOME/.cache}/jail-vm)
#   JAIL_VM_ACCEL    tcg (default) or kvm, where /dev/kvm boots stock kernels
#   JAIL_VM_APPEND   extra kernel command line arguments
#   JAIL_VM_CONSOLE  save the guest's console (kernel log, init) to this file
#   JAIL_VM_ROOT     tmpfs (default): COMMAND runs on a tmpfs root the initramfs
#                    was copied to; initramfs: on the initramfs itself, where
#                    pivot_root(2) fails with EINVAL (the case jail must handle)
#
# The guest runs Debian's own kernel (linux-image-amd64) with a busybox
# userland; both are fetched with `apt-get download` (nothing is installed)
# once per package version and cached. See README.md next to this script.
set -euo pipefail

readonly EXIT_INFRA=99 EXIT_USAGE=2
readonly GUEST_DIR=/jail-it
PROG=${0##*/}

TIMEOUT=900 MEM=2G CPUS=2 dashdash=''
FILES=()

# Everything temporary lives in $WORK (per run) or $BUILD (a cache build in
# progress); cleanup removes both and stops the timer and qemu we started.
WORK='' BUILD='' QEMU_PID='' TIMER_PID=''

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
usage_error() {
	echo "$PROG: $*" >&2
	echo "usage: $PROG [--timeout SECS] [--mem SIZE] [--cpus N] FILE... -- COMMAND [ARGS...]" >&2
	exit "$EXIT_USAGE"
}
# infra prints the one-line reason for an infrastructure failure and exits.
infra() {
	echo "$PROG: infrastructure failure: $*" >&2
	exit "$EXIT_INFRA"
}
note() { echo "$PROG: $*" >&2; }

stop_qemu() {
	[ -n "$QEMU_PID" ] || return 0
	kill -TERM "$QEMU_PID" 2>/dev/null || true
	local i
	for ((i = 0; i < 50; i++)); do
		kill -0 "$QEMU_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$QEMU_PID" 2>/dev/null || true
	wait "$QEMU_PID" 2>/dev/null || true
	QEMU_PID=
}

# shellcheck disable=SC2317 # called from traps
cleanup() {
	stop_qemu
	if [ -n "$TIMER_PID" ]; then
		kill "$TIMER_PID" 2>/dev/null || true
		wait "$TIMER_PID" 2>/dev/null || true
		TIMER_PID=
	fi
	if [ -n "$WORK" ]; then rm -rf "$WORK"; fi
	if [ -n "$BUILD" ]; then rm -rf "$BUILD"; fi
}
# shellcheck disable=SC2317 # called from traps
on_signal() {
	trap - EXIT INT TERM HUP
	cleanup
	note "interrupted (SIG$1); the VM was stopped"
	exit "$2"
}
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

# ---------------------------------------------------------------------------
# Arguments

while [ $# -gt 0 ]; do
	case $1 in
	--timeout | --mem | --cpus)
		[ $# -ge 2 ] || usage_error "$1 needs a value"
		case $1 in
		--timeout) TIMEOUT=$2 ;;
		--mem) MEM=$2 ;;
		--cpus) CPUS=$2 ;;
		esac
		shift 2
		;;
	--timeout=*) TIMEOUT=${1#*=}; shift ;;
	--mem=*) MEM=${1#*=}; shift ;;
	--cpus=*) CPUS=${1#*=}; shift ;;
	-h | --help) usage; exit 0 ;;
	--) shift; dashdash=1; break ;;
	-*) usage_error "unknown option $1 (name a file starting with - as ./$1)" ;;
	*) FILES+=("$1"); shift ;;
	esac
done
[ -n "$dashdash" ] || usage_error "no -- COMMAND"
[ $# -gt 0 ] || usage_error "no COMMAND after --"
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || usage_error "--timeout: want a number of seconds, got '$TIMEOUT'"
[[ $MEM =~ ^[1-9][0-9]*[MG]?$ ]] || usage_error "--mem: want a size like 2G or 512M, got '$MEM'"
[[ $CPUS =~ ^[1-9][0-9]*$ ]] || usage_error "--cpus: want a number, got '$CPUS'"
case ${JAIL_VM_ACCEL:-tcg} in
# /dev/kvm may exist and still not boot a stock kernel (a nested PVM KVM
# hangs it), so TCG is the default: 5-20x slower, and it always works.
tcg) accel=(-accel tcg -cpu max) ;;
kvm) accel=(-accel kvm -cpu host) ;;
*) usage_error "JAIL_VM_ACCEL: want tcg or kvm, got '$JAIL_VM_ACCEL'" ;;
esac
declare -A seen=()
for f in ${FILES[@]+"${FILES[@]}"}; do
	[ -e "$f" ] || usage_error "no such file: $f"
	b=$(basename -- "$f")
	[ -z "${seen[$b]:-}" ] || usage_error "two files named $b: $f and ${seen[$b]}"
	seen[$b]=$f
done

# ---------------------------------------------------------------------------
# Host requirements. Only qemu is needed on every run; apt-get, apt-cache,
# dpkg-deb and xz only when the cache is (re)built.

# wait -n -p (below) came with bash 5.1.
if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
	infra "needs bash 5.1 or newer (this is $BASH_VERSION)"
fi
command -v qemu-system-x86_64 >/dev/null ||
	infra "qemu-system-x86_64 not found: install it with 'apt-get install qemu-system-x86'"

CACHE=${JAIL_VM_CACHE:-${XDG_CACHE_HOME:-${HOME:?}/.cache}/jail-vm}
mkdir -p "$CACHE" || infra "cannot create the cache dir $CACHE"
# A run killed with SIGKILL leaves its $WORK (the initrd: tens of MB)
# behind; the next run removes those whose run.sh is gone.
for d in "${TMPDIR:-/tmp}"/jail-vm.??????; do
	if [ -O "$d" ] && [ -f "$d/pid" ] && ! kill -0 "$(cat "$d/pid")" 2>/dev/null; then rm -rf "$d"; fi
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/jail-vm.XXXXXX") || infra "mktemp failed"
echo $$ >"$WORK/pid"

# ---------------------------------------------------------------------------
# The cached part: kernel + base initramfs, one directory per kernel package
# version, busybox-static version and recipe (RECIPE_HASH below), so a new
# Debian kernel or a change to how the base is built rebuilds it, and nothing
# else does. The .debs are kept too: a new recipe downloads nothing.

# MODULES_RE selects the kernel modules shipped in the guest (with their
# dependencies): nothing cgroup v2 needs is a module, but later tests of
# network namespaces need veth, bridges, tun and nf_tables. The guest kernel
# loads them on demand through /sbin/modprobe (busybox) and modules.alias.
# crc32c: libcrc32c (conntrack, nf_nat) asks the crypto API for it at load
# time, by alias, which no modules.dep line shows; ext4 needs it too. loop,
# ext4 and the quota formats: a loop-mounted ext4 with project quotas, for
# the dir workspace's enforced size (the guest kernel has CONFIG_QUOTA,
# which the hosts jail is developed on lack).
readonly MODULES_RE='^kernel/(drivers/net/(veth|tun|dummy)|drivers/block/loop|fs/ext4/ext4|fs/quota/quota_(v2|tree)|crypto/crc32c_generic|arch/x86/crypto/crc32c-intel|net/bridge/(bridge|br_netfilter)|fs/overlayfs/overlay|net/(ipv4/|ipv6/|bridge/)?netfilter/(nf_tables|nfnetlink|nf_conntrack|nf_nat|nf_reject_ipv[46]|nft_[a-z0-9_]+))\.ko:'

# resolve sets KPKG and KVER (the versioned kernel package linux-image-amd64
# depends on, e.g. linux-image-6.1.0-56-amd64, and its version) and BBVER
# from the local apt lists; no network. apt-cache takes ~1 s here, so the
# answer is kept until the lists or the apt preferences change.
resolve() {
	command -v apt-cache >/dev/null || return 1
	local stamp saved=$CACHE/resolved out s
	stamp=$(stat -c '%n %s %Y' /var/lib/apt/lists/*_Packages* /etc/apt/preferences /etc/apt/preferences.d/* 2>/dev/null |
		sha256sum | cut -c1-16)
	if [ -f "$saved" ] && read -r s KPKG KVER BBVER <"$saved" && [ "$s" = "$stamp" ] && [ -n "$BBVER" ]; then
		return 0
	fi
	# The meta package pins its kernel: "Depends: linux-image-6.1.0-56-amd64 (= 6.1.192-2)".
	out=$(apt-cache show --no-all-versions linux-image-amd64 busybox-static 2>/dev/null | awk '
		/^Package:/ { p = $2 }
		p == "linux-image-amd64" && /^Depends:/ && match($0, /linux-image-[0-9][^ ,]* \(= [^)]*\)/) {
			s = substr($0, RSTART, RLENGTH); gsub(/[()=]/, "", s); split(s, a, " "); k = a[1] " " a[2]
		}
		p == "busybox-static" && /^Version:/ { b = $2 }
		END { if (k != "" && b != "") print k, b }')
	[ -n "$out" ] || return 1
	read -r KPKG KVER BBVER <<<"$out"
	echo "$stamp $out" >"$saved.$$" && mv "$saved.$$" "$saved"
}

# extract_vmlinux BZIMAGE OUT: write the kernel's uncompressed ELF image.
# qemu boots it through the PVH entry point (CONFIG_PVH), which skips the
# bzImage's self-decompression: ~5 s of xz under TCG, more than the rest of
# the boot. The x86 boot protocol (>= 2.08) gives the payload's offset
# (relative to the protected-mode code, after the setup sectors) and length;
# the payload's last 4 bytes are the uncompressed size, which checks the
# result. Debian's busybox xz lacks the x86 BCJ filter the kernel uses, so
# this needs xz-utils.
extract_vmlinux() {
	local bz=$1 out=$2 sects off len size
	command -v xz >/dev/null || return 1
	sects=$(od -An -tu1 -j $((0x1f1)) -N1 "$bz" | tr -d ' ')
	[ "$sects" != 0 ] || sects=4
	read -r off len < <(od -An -tu4 -j $((0x248)) -N8 "$bz")
	off=$(((sects + 1) * 512 + off))
	[ "$(od -An -tx1 -j "$off" -N6 "$bz" | tr -d ' ')" = fd377a585a00 ] || return 1 # xz magic
	size=$(od -An -tu4 -j $((off + len - 4)) -N4 "$bz" | tr -d ' ')
	# head stops reading, tail reads to the end: no SIGPIPE under pipefail.
	head -c $((off + len)) "$bz" | tail -c "$len" | xz -dc --single-stream >"$out" 2>/dev/null || return 1
	[ "$(stat -c %s "$out")" = "$size" ] && [ "$(head -c4 "$out")" = $'\x7fELF' ]
}

# build_base writes $BASE/{vmlinux,base.cpio,busybox}. Runs under the cache lock.
build_base() {
	local c
	for c in apt-get dpkg-deb; do
		command -v "$c" >/dev/null || infra "$c not found: the first run needs Debian's apt to fetch the kernel"
	done
	BUILD=$(mktemp -d "$CACHE/.build.XXXXXX")
	local debs=$CACHE/debs kdeb bbdeb
	mkdir -p "$debs"
	kdeb=$(find "$debs" -name "${KPKG}_${KVER#*:}_amd64.deb" -print -quit)
	bbdeb=$(find "$debs" -name "busybox-static_*${BBVER#*:}_amd64.deb" -print -quit)
	if [ -z "$kdeb" ] || [ -z "$bbdeb" ]; then
		note "downloading $KPKG $KVER and busybox-static $BBVER (once per version)"
		mkdir "$BUILD/dl"
		# apt drops privileges to _apt for downloads, which cannot write
		# into a private dir; this is a user-owned download, sandbox or not.
		(cd "$BUILD/dl" && apt-get download -q -o APT::Sandbox::User="$(id -un)" \
			"$KPKG=$KVER" "busybox-static=$BBVER") >"$BUILD/apt.log" 2>&1 ||
			infra "apt-get download $KPKG busybox-static failed: $(grep -E '^(E|W):' "$BUILD/apt.log" | head -n1)"
		# Older versions are useless now: keep one of each.
		find "$debs" -name '*.deb' -delete
		mv "$BUILD"/dl/*.deb "$debs"/
		kdeb=$(find "$debs" -name "${KPKG}_*.deb" -print -quit)
		bbdeb=$(find "$debs" -name "busybox-static_*.deb" -print -quit)
	fi
	note "building the VM image in $BASE"
	local k=$BUILD/k root=$BUILD/root bb krel
	mkdir "$k" "$root"
	dpkg-deb -x "$bbdeb" "$BUILD/bb" || infra "dpkg-deb -x $bbdeb failed"
	dpkg-deb -x "$kdeb" "$k" || infra "dpkg-deb -x $kdeb failed"
	bb=$BUILD/bb/bin/busybox
	"$bb" true || infra "the busybox from $bbdeb does not run here"
	krel=$(find "$k/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n1)
	if [ -z "$krel" ] || [ ! -f "$k/boot/vmlinuz-$krel" ]; then infra "$kdeb holds no kernel"; fi

	# The root, usr-merged like Debian 12: /bin, /sbin, /lib and /lib64 are
	# symlinks into /usr, which jail's default root recreates as symlinks.
	mkdir -p "$root"/usr/{bin,sbin,lib/modules,lib64} "$root"/{dev,etc/jail-vm,proc,sys,tmp,run} "$root/$GUEST_DIR"
	mkdir -m 0700 "$root/root"
	ln -s usr/bin "$root/bin"
	ln -s usr/sbin "$root/sbin"
	ln -s usr/lib "$root/lib"
	ln -s usr/lib64 "$root/lib64"
	cp "$bb" "$root/usr/bin/busybox"
	local a
	# busybox --list-full names each applet's usual place (bin/ls, sbin/ip, usr/bin/awk).
	for a in $("$bb" --list-full); do
		case $a in
		bin/* | usr/bin/*) a=usr/bin/${a##*/} ;;
		sbin/* | usr/sbin/*) a=usr/sbin/${a##*/} ;;
		*) continue ;;
		esac
		[ -e "$root/$a" ] || ln -s /usr/bin/busybox "$root/$a"
	done

	# Kernel modules: busybox's depmod writes modules.dep with every
	# dependency listed (transitively), so the closure is one awk pass.
	"$bb" depmod -b "$k" "$krel" || infra "depmod of $krel failed"
	local mods=$k/lib/modules/$krel
	mkdir -p "$root/usr/lib/modules/$krel"
	# ENVIRON, not -v: awk would process the backslashes of a -v value.
	re=$MODULES_RE awk '$0 ~ ENVIRON["re"] { sub(":", "", $1); for (i = 1; i <= NF; i++) print $i }' "$mods/modules.dep" |
		sort -u | (cd "$mods" && xargs -r cp --parents -t "$root/usr/lib/modules/$krel") ||
		infra "copying kernel modules failed"
	cp "$mods"/modules.{order,builtin,builtin.modinfo} "$root/usr/lib/modules/$krel/"
	"$bb" depmod -b "$root" "$krel" || infra "depmod of the guest's modules failed"

	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin' >"$root/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$root/etc/group"
	printf '127.0.0.1\tlocalhost jail-vm\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
	printf 'passwd: files\ngroup: files\nhosts: files\n' >"$root/etc/nsswitch.conf"
	echo jail-vm >"$root/etc/hostname"

	# Stage 1, PID 1 on the initramfs. jail, like every container runtime,
	# enters its new root with pivot_root(2), which fails with EINVAL while
	# the current root is the initramfs ("rootfs" is the one mount without a
	# parent). So copy the tree onto a tmpfs and switch_root into it; the
	# old contents are freed. JAIL_VM_ROOT=initramfs skips that, to test
	# jail on such a root.
	cat >"$root/init" <<-'EOF'
		#!/bin/sh
		export PATH=/usr/sbin:/usr/bin
		fail() { echo "jail-vm: FATAL: $*"; poweroff -f; reboot -f; }
		# JAIL_VM_ROOT=initramfs: stay on the initramfs, to test that case.
		. /etc/jail-vm/run || fail "no /etc/jail-vm/run"
		if [ "${JAIL_VM_ROOT:-}" = initramfs ]; then exec /etc/jail-vm/init; fi
		mkdir /newroot && mount -t tmpfs -o mode=0755 root /newroot || fail "mount the root tmpfs"
		for f in /*; do
			case $f in /newroot | /init) continue ;; esac
			cp -a "$f" /newroot/ || fail "copy $f to the root tmpfs"
		done
		exec switch_root /newroot /etc/jail-vm/init
	EOF
	# Stage 2, PID 1 on the tmpfs root: mounts, cgroup v2, then COMMAND.
	# COMMAND's output goes to the second serial port (the host's stdout);
	# the first one is the console (kernel log, this script), where the
	# status line goes. A line that does not carry the per-run nonce is
	# not COMMAND's status, whatever COMMAND prints.
	cat >"$root/etc/jail-vm/init" <<-'EOF'
		#!/bin/sh
		export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
		fail() { echo "jail-vm: FATAL: $*"; poweroff -f; reboot -f; }
		mount -t proc -o nosuid,nodev,noexec proc /proc || fail "mount /proc"
		mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || fail "mount /sys"
		mount -t devtmpfs -o nosuid,mode=0755 dev /dev || fail "mount /dev"
		mkdir -p /dev/pts /dev/shm
		mount -t devpts -o nosuid,noexec,mode=0620,ptmxmode=0666 devpts /dev/pts || fail "mount /dev/pts"
		mount -t tmpfs -o nosuid,nodev,mode=1777 shm /dev/shm || fail "mount /dev/shm"
		mount -t tmpfs -o nosuid,nodev,mode=1777 tmp /tmp || fail "mount /tmp"
		mount -t tmpfs -o nosuid,nodev,mode=0755 run /run || fail "mount /run"
		# The kernel runs with cgroup_no_v1=all: v2 is the only hierarchy.
		# nsdelegate as systemd mounts it: cgroup namespaces are delegation
		# boundaries.
		mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate cgroup2 /sys/fs/cgroup || fail "mount cgroup2"
		for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
			echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control || fail "enable the $c controller"
		done
		hostname -F /etc/hostname
		ip link set lo up || fail "bring lo up"
		. /etc/jail-vm/run || fail "no /etc/jail-vm/run"
		echo "jail-vm: cgroup2 subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control)"
		# Raw: no \n -> \r\n, no echo. fd 3 keeps the port open, and its
		# settings with it, until the end.
		exec 3<>/dev/ttyS1 && stty raw -echo <&3 || fail "set up /dev/ttyS1"
		cd /jail-it || fail "no /jail-it"
		env -i PATH="$PATH" HOME=/root LANG=C.UTF-8 TERM=dumb sh /etc/jail-vm/command </dev/null >&3 2>&3 3>&-
		rc=$?
		# stty sets the mode with TCSADRAIN: it returns once the UART has
		# sent all of COMMAND's output, which poweroff would cut off.
		stty raw -echo <&3
		echo "JAIL-VM-EXIT $JAIL_VM_NONCE $rc"
		sync
		poweroff -f
		reboot -f
	EOF
	chmod 0755 "$root/init" "$root/etc/jail-vm/init"

	# newc is the only cpio format the kernel reads; -R 0:0 because the
	# files must be root's in the guest whoever builds the image.
	# Uncompressed: gunzip under TCG costs more than reading a few MB more.
	(cd "$root" && find . | "$bb" cpio -o -H newc -R 0:0 2>/dev/null) >"$BUILD/base.cpio" ||
		infra "cpio of the base image failed"
	# The per-run archive is appended to this one, and the kernel looks for
	# the next cpio header only at a 4-byte aligned offset: it would skip a
	# misaligned archive without a word. newc pads its entries to 4 bytes;
	# make sure of it.
	truncate -s %4 "$BUILD/base.cpio"

	if ! grep -qx 'CONFIG_PVH=y' "$k/boot/config-$krel" || ! extract_vmlinux "$k/boot/vmlinuz-$krel" "$BUILD/vmlinux"; then
		note "cannot extract an uncompressed PVH kernel (xz-utils missing?); booting the bzImage, ~5 s slower under TCG"
		cp "$k/boot/vmlinuz-$krel" "$BUILD/vmlinux"
	fi
	mkdir "$BUILD/base"
	# busybox also packs the per-run archive: the host needs no cpio.
	mv "$BUILD/vmlinux" "$BUILD/base.cpio" "$BUILD/base/"
	cp "$bb" "$BUILD/base/busybox"
	# The rename publishes the directory whole: a run sees all of it or none.
	mv "$BUILD/base" "$BASE"
	rm -rf "$BUILD"
	BUILD=
	# Bases of older kernels, busybox or versions of this script.
	find "$CACHE" -maxdepth 1 -name 'base-*' -type d ! -path "$BASE" -exec rm -rf {} +
}

# The base depends on the packages and on how it is built: hash the
# functions that build it, so that editing them (and nothing else in this
# script) rebuilds it.
RECIPE_HASH=$({ declare -f build_base extract_vmlinux; echo "$MODULES_RE $GUEST_DIR"; } | sha256sum | cut -c1-12)
if resolve; then
	BASE=$CACHE/base-${KPKG}_${KVER//:/%}-busybox_${BBVER//:/%}-$RECIPE_HASH
else
	# Offline or no Debian apt lists: a base this same script built still works.
	BASE=$(find "$CACHE" -maxdepth 1 -name "base-*-$RECIPE_HASH" -type d -printf '%T@ %p\n' 2>/dev/null |
		sort -n | tail -n1 | cut -d' ' -f2-)
	[ -n "$BASE" ] || infra "cannot resolve linux-image-amd64 and busybox-static with apt-cache: this needs a Debian 12 host with its apt lists ('apt-get update')"
	note "apt-cache cannot resolve the packages; using the cached ${BASE##*/}"
fi

if [ ! -f "$BASE/base.cpio" ]; then
	exec 9>"$CACHE/.lock"
	flock 9
	[ -f "$BASE/base.cpio" ] || build_base
	exec 9>&-
fi

# ---------------------------------------------------------------------------
# Per run: FILEs, COMMAND and the nonce as a second, uncompressed cpio
# archive appended to the base one; the kernel unpacks both.

stage=$WORK/stage
mkdir -p "$stage/etc/jail-vm" "$stage$GUEST_DIR"
for f in ${FILES[@]+"${FILES[@]}"}; do
	cp -R -L -p -- "$f" "$stage$GUEST_DIR/" || infra "copying $f failed"
done
# Readable by all: jail runs the jailed side of root's runs as uid 65534,
# which must be able to read and execute these files.
chmod -R a+rX "$stage$GUEST_DIR"
chmod 0755 "$stage$GUEST_DIR"

NONCE=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
# sq quotes its argument for sh: 'it'\''s'.
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
{
	echo "JAIL_VM_NONCE=$NONCE"
	echo "JAIL_VM_ROOT=$(sq "${JAIL_VM_ROOT:-tmpfs}")"
} >"$stage/etc/jail-vm/run"
{
	printf 'exec'
	for a in "$@"; do printf ' %s' "$(sq "$a")"; done
	echo
} >"$stage/etc/jail-vm/command"
chmod 0644 "$stage/etc/jail-vm/run" "$stage/etc/jail-vm/command"
# Only new entries: listing ./etc would reset the base's /etc to this
# temp dir's mode.
(cd "$stage" && { printf '%s\n' ./etc/jail-vm/run ./etc/jail-vm/command; find ".$GUEST_DIR"; } |
	"$BASE/busybox" cpio -o -H newc -R 0:0 2>/dev/null) >"$WORK/run.cpio" ||
	infra "cpio of the files failed"
cat "$BASE/base.cpio" "$WORK/run.cpio" >"$WORK/initrd" || infra "writing the initrd to $WORK failed (disk full?)"
rm -rf "$stage" "$WORK/run.cpio"

# ---------------------------------------------------------------------------
# Boot.

# If this script is killed with SIGKILL (no trap runs), the kernel kills
# qemu and the timer with it: setpriv sets PR_SET_PDEATHSIG and execs the
# command in place.
pdeath=()
if setpriv --help 2>/dev/null | grep -q -- --pdeathsig; then pdeath=(setpriv --pdeathsig KILL --); fi
# cgroup_no_v1=all: no v1 hierarchy can take a controller from v2.
# panic=-1 with -no-reboot: a guest panic ends qemu at once.
# random.trust_cpu=on: getrandom() need not wait for entropy in TCG.
append="console=ttyS0 cgroup_no_v1=all panic=-1 quiet random.trust_cpu=on ${JAIL_VM_APPEND:-}"
console=$WORK/console.log
# -nodefaults: no VGA, NIC, floppy or monitor to emulate. The first serial
# port is the console (to a file), the second is COMMAND's output (stdout).
${pdeath[@]+"${pdeath[@]}"} qemu-system-x86_64 "${accel[@]}" -m "$MEM" -smp "$CPUS" \
	-nodefaults -no-user-config -display none -no-reboot \
	-kernel "$BASE/vmlinux" -initrd "$WORK/initrd" -append "$append" \
	-serial "file:$console" -chardev stdio,id=out,signal=off -serial chardev:out \
	</dev/null 2>"$WORK/qemu.log" &
QEMU_PID=$!
${pdeath[@]+"${pdeath[@]}"} sleep "$TIMEOUT" &
TIMER_PID=$!
finished=
wait -n -p finished "$QEMU_PID" "$TIMER_PID" || true
timed_out=
if [ "$finished" = "$TIMER_PID" ]; then
	timed_out=1
	TIMER_PID=
	stop_qemu
else
	wait "$QEMU_PID" 2>/dev/null || true # qemu's own status says nothing: the marker does
	QEMU_PID=
	kill "$TIMER_PID" 2>/dev/null || true
	wait "$TIMER_PID" 2>/dev/null || true
	TIMER_PID=
fi

if [ -n "${JAIL_VM_CONSOLE:-}" ]; then tr -d '\r' <"$console" >"$JAIL_VM_CONSOLE" || true; fi
rc=$(sed -n "s/.*JAIL-VM-EXIT $NONCE \([0-9][0-9]*\).*/\1/p" "$console" | tail -n1)
if [ -n "$rc" ]; then exit "$rc"; fi

# No status: show what the guest and qemu said, then the one-line reason.
{
	echo "--- last lines of the VM console ---"
	if [ -s "$console" ]; then tail -n 30 "$console" | tr -d '\r'; else echo "(empty)"; fi
	# Less the line of our own SIGTERM at the timeout.
	if grep -v 'terminating on signal' "$WORK/qemu.log" >"$WORK/qemu.err"; then
		echo "--- qemu ---"
		cat "$WORK/qemu.err"
	fi
	echo "---"
} >&2
fatal=$(grep -a -o 'jail-vm: FATAL: .*' "$console" | tr -d '\r' | tail -n1 || true)
if [ -n "$timed_out" ]; then
	infra "the VM did not report COMMAND's exit status within --timeout $TIMEOUT s"
elif [ -n "$fatal" ]; then
	infra "guest setup failed: ${fatal#jail-vm: FATAL: }"
else
	infra "the VM stopped without reporting COMMAND's exit status (see the console above)"
fi
