#!/usr/bin/env bash
# soak.sh is the fault-injection soak (bench/cmd/soak): RUNS strict runs,
#
#   jail run --profile strict --memory 64M --pids 64 --json -- sh -c '...'
#
# 8 at once, with the jail process SIGKILLed at a random point (before the
# clone, during the set-up, mid-run, during the teardown) in 10 % of them.
# Every report of a run that was not killed must be exactly right, and after
# `jail check --clean` nothing may be left on the host: mounts, processes,
# cgroups, ptys, temporary files, state. It prints figures and exits 1 on a
# leak or a wrong report; it is not a timed test. See bench/README.md.
#
# Usage: sudo bench/soak.sh [-n RUNS] [-j JAIL] [-- SOAK FLAGS]
#   -n RUNS     runs (default 10000; CI runs 300)
#   -j JAIL     jail binary (default: $JAIL, else built statically into a temporary directory)
#   SOAK FLAGS  passed on to bench/cmd/soak, e.g. -- -j 8 -kill 0.1 -seed 42 -o /tmp/soak-out
#               (there -j is the number of runs in flight; see go doc ./bench/cmd/soak)
set -euo pipefail

bench_tool=soak
bench_rounds=10000
bench_usage="[-n RUNS] [-j JAIL] [-- SOAK FLAGS]"
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
shift $((OPTIND - 1))
if ((EUID != 0)); then
	echo "$name: not root: --memory and --pids are likely refused (run with sudo)" >&2
fi
"$tmp/soak" -jail "$jail_bin" -n "$rounds" "$@"
