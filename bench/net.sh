#!/usr/bin/env bash
# net.sh measures what a jail's network costs a strict start:
#
#   nonet    jail run --profile strict --net host -- /bin/true   (no net namespace)
#   none     jail run --profile strict -- /bin/true              (its own, lo only)
#   egress   jail run --profile strict --net egress --allow 10.99.9.2:80 -- /bin/true
#
# interleaved (bench/cmd/benchrun), "none" the base; then the throughput
# of none and egress with 8 runs in flight (3 rounds of 40 runs each). Everything runs in a
# network namespace this script makes (with a veth pair towards
# 10.99.9.0/24 that forwards), so the veths and tables egress jails make
# never touch this machine's own network; no packet is sent. Root only.
#
# Usage: sudo bench/net.sh [-n ROUNDS] [-j JAIL]
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

ns="jail-bench-$$"
ip netns add "$ns"
trap 'ip netns del "$ns"; rm -rf "$tmp"' EXIT
ip -n "$ns" link set lo up
ip -n "$ns" link add uplink type veth peer name uplink-peer
ip -n "$ns" link set uplink-peer up
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
