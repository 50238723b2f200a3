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

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

for idle in 0 100ms; do
	echo "== idle before each run: $idle =="
	"$tmp/benchrun" -n "$rounds" -w 5 -idle "$idle" -base nolimits \
		-c "nolimits=$jail_bin run --profile strict -- /bin/true" \
		-c "limits=$jail_bin run --profile strict --memory 256M --pids 64 -- /bin/true"
	echo
done
