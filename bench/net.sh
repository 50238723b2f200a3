#!/usr/bin/env bash
# net.sh measures what a jail's network costs a strict start:
#
#   nonet    jail run --profile strict --net host -- /bin/true   (no net namespace)
#   none     jail run --profile strict -- /bin/true              (its own, lo only)
#   egress   jail run --profile strict --net egress --allow 10.99.9.2:80 -- /bin/true
#
# interleaved (bench/cmd/benchrun), "none" the base; then the throughput
# of none and egress with 8 runs in flight (3 rounds of 40 runs each);
# then TCP throughput (512 MiB with dd into a python3 sink): over this
# namespace's loopback, from it through a veth to a sink namespace, and
# from an egress jail through its veth, the forwarding and NAT to the same
# sink (median of 3); then, where pasta is installed, the same start and
# TCP figures for an unprivileged caller, whose egress goes through pasta.
# Everything runs in a
# network namespace this script makes (with a veth pair towards
# 10.99.9.0/24 that forwards), so the veths and tables egress jails make
# never touch this machine's own network; no packet is sent. Root only.
#
# Usage: sudo bench/net.sh [-n ROUNDS] [-j JAIL]
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

ns="jail-bench-$$"
sink="jail-bench-sink-$$"
ip netns add "$ns"
ip netns add "$sink"
sinks=()
trap 'for p in "${sinks[@]}"; do kill "$p" 2>/dev/null; done; ip netns del "$ns"; ip netns del "$sink"; rm -rf "$tmp"' EXIT
ip -n "$ns" link set lo up
ip -n "$sink" link set lo up
ip -n "$ns" link add uplink type veth peer name eth0 netns "$sink"
ip -n "$sink" addr add 10.99.9.2/24 dev eth0
ip -n "$sink" link set eth0 up
ip -n "$ns" addr add 10.99.9.1/24 dev uplink
ip -n "$ns" link set uplink up
nsenter --net="/run/netns/$ns" sh -c 'echo 1 > /proc/sys/net/ipv4/conf/uplink/forwarding'

nsenter --net="/run/netns/$ns" "$tmp/benchrun" -n "$rounds" -w 5 -base none \
	-c "nonet=$jail_bin run --profile strict --net host -- /bin/true" \
	-c "none=$jail_bin run --profile strict -- /bin/true" \
	-c "egress=$jail_bin run --profile strict --net egress --allow 10.99.9.2:80 -- /bin/true"

echo
echo "== throughput, 8 in flight =="
nsenter --net="/run/netns/$ns" "$tmp/benchrun" -n 3 -inflight 8 -batch 40 -base none \
	-c "none=$jail_bin run --profile strict -- /bin/true" \
	-c "egress=$jail_bin run --profile strict --net egress --allow 10.99.9.2:80 -- /bin/true"

# A sink that reads whatever it is sent, in namespace $1 on address $2.
start_sink() {
	nsenter --net="/run/netns/$1" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(8)
while True:
    c, _ = s.accept()
    while c.recv(1 << 20): pass
    c.close()' "$2" &
	sinks+=($!)
}
start_sink "$ns" 127.0.0.1
start_sink "$sink" 10.99.9.2
sleep 0.5

# mibps NS CMD... runs CMD (which sends 512 MiB) in NS three times and
# prints the median MiB/s.
mibps() {
	local ns=$1; shift
	for _ in 1 2 3; do
		local t0 t1
		t0=$(date +%s%N)
		nsenter --net="/run/netns/$ns" "$@" >/dev/null
		t1=$(date +%s%N)
		echo $(( 512 * 1000000000 / (t1 - t0) ))
	done | sort -n | sed -n 2p
}
send='dd if=/dev/zero bs=1M count=512 status=none > /dev/tcp/$0/5001'
echo
echo "== TCP throughput, 512 MiB, MiB/s (median of 3) =="
echo "loopback          $(mibps "$ns" bash -c "$send" 127.0.0.1)"
echo "veth, no jail     $(mibps "$ns" bash -c "$send" 10.99.9.2)"
echo "egress jail       $(mibps "$ns" "$jail_bin" run --profile strict --net egress --allow 10.99.9.2:5001 -- bash -c "$send" 10.99.9.2)"

# An unprivileged caller's egress goes through pasta. It runs as uid
# 60124 (no passwd entry needed), in a mount namespace of its own where
# /dev/net/tun is a node of mode 0666 made here, as udev makes it (this
# machine's may be 0600); both contenders pay the same wrapper
# (unshare, mount, setpriv), so user-egress minus user-none is pasta's
# cost.
if ! command -v pasta >/dev/null; then
	echo
	echo "(no pasta: apt-get install passt to measure an unprivileged caller's egress)"
	exit 0
fi
mkdir "$tmp/u"
cp "$jail_bin" "$tmp/u/jail"
chmod 0711 "$tmp"
chmod 0755 "$tmp/u" "$tmp/u/jail"
mknod -m 0666 "$tmp/tun" c 10 200
cat >"$tmp/asuser" <<EOS
#!/bin/sh
mount --bind $tmp/tun /dev/net/tun && exec setpriv --reuid=60124 --regid=60124 --clear-groups "\$@"
EOS
chmod 0755 "$tmp/asuser"
ujail="unshare -m $tmp/asuser $tmp/u/jail"
# pasta copies the namespace's default route into the jail's: towards the
# sink, the namespace's only link.
ip -n "$ns" route add default via 10.99.9.2
echo
echo "== an unprivileged caller: pasta =="
nsenter --net="/run/netns/$ns" "$tmp/benchrun" -n "$rounds" -w 5 -base user-none \
	-c "user-none=$ujail run --profile strict -- /bin/true" \
	-c "user-egress=$ujail run --profile strict --net egress --allow 10.99.9.2:80 -- /bin/true"
# shellcheck disable=SC2086 # $ujail is words
echo "pasta egress jail $(mibps "$ns" $ujail run --profile strict --net egress --allow 10.99.9.2:5001 -- bash -c "$send" 10.99.9.2)"
