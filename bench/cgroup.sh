#!/usr/bin/env bash
# cgroup.sh measures what the run's cgroup costs a strict start:
#
#   nolimits  jail run --profile strict -- /bin/true
#   limits    jail run --profile strict --memory 256M --pids 64 -- /bin/true
#
# interleaved (bench/cmd/benchrun), back to back and again with 100 ms of
# idle before each run: on cgroup v1 a move by pid waits for an RCU grace
# period after a quiet spell, which jail avoids by having its child move
# itself (see README.md, "Cgroups").
#
# Usage: sudo bench/cgroup.sh [-n ROUNDS] [-j JAIL]
set -euo pipefail

rounds=40
jail_bin="${JAIL:-}"
while getopts "n:j:h" opt; do
	case "$opt" in
	n) rounds="$OPTARG" ;;
	j) jail_bin="$OPTARG" ;;
	*)
		echo "usage: cgroup.sh [-n ROUNDS] [-j JAIL]" >&2
		exit 2
		;;
	esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/jail-bench-cgroup.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if ! command -v go >/dev/null; then
	echo "cgroup.sh: go is not in PATH (try: sudo env PATH=\"\$PATH\" bench/cgroup.sh)" >&2
	exit 1
fi
(cd "$repo" && go build -o "$tmp/benchrun" ./bench/cmd/benchrun)
if [[ -z "$jail_bin" ]]; then
	(cd "$repo" && CGO_ENABLED=1 go build -tags osusergo,netgo \
		-ldflags '-linkmode external -extldflags -static' -o "$tmp/jail" ./cmd/jail)
	jail_bin="$tmp/jail"
fi
[[ "$jail_bin" == */* ]] || jail_bin="./$jail_bin"

for idle in 0 100ms; do
	echo "== idle before each run: $idle =="
	"$tmp/benchrun" -n "$rounds" -w 5 -idle "$idle" -base nolimits \
		-c "nolimits=$jail_bin run --profile strict -- /bin/true" \
		-c "limits=$jail_bin run --profile strict --memory 256M --pids 64 -- /bin/true"
	echo
done
