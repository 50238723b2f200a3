#!/usr/bin/env bash
# seccomp.sh measures what the seccomp filter costs, interleaved (see
# bench/cmd/benchrun):
#
#   start   jail run --profile strict -- /bin/true, with --seccomp none,
#           default and strict: the filter's share of a start (compiling
#           the policy in the parent, loading it in the child)
#   loop    a static program making 1M getppid calls, and 100k
#           open-read-close of a small file, under none, an allow-all
#           filter, default and strict: the filter's cost per syscall. The
#           allow-all filter separates what the kernel charges any filtered
#           process (the syscall entry's seccomp path) from what a policy's
#           program adds
#
# The cold compile time of each built-in policy is a Go benchmark:
#   go test -run XXX -bench Compile ./seccomp/
#
# Usage: sudo bench/seccomp.sh [-n ROUNDS] [-j JAIL]
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
chmod 755 "$tmp" # the jail's user (host uid 65534 under root) runs sysloop from here
gcc -static -O2 -o "$tmp/sysloop" "$repo/bench/testdata/sysloop.c"
printf 'description: allows everything\ndefault_action: allow\nrules: []\n' >"$tmp/allowall.yaml"
chmod 644 "$tmp/allowall.yaml"

run="$jail_bin run --profile strict --timeout 60s --ro-bind $tmp:/b"
echo "== start: /bin/true =="
"$tmp/benchrun" -n "$rounds" -w 5 -base none \
	-c "none=$run --seccomp none -- /bin/true" \
	-c "default=$run --seccomp default -- /bin/true" \
	-c "strict=$run --seccomp strict -- /bin/true"
for loop in "getppid 1000000" "read 100000"; do
	echo
	echo "== loop: sysloop $loop =="
	"$tmp/benchrun" -n "$rounds" -w 3 -base none \
		-c "none=$run --seccomp none -- /b/sysloop $loop" \
		-c "allowall=$run --seccomp $tmp/allowall.yaml -- /b/sysloop $loop" \
		-c "default=$run --seccomp default -- /b/sysloop $loop" \
		-c "strict=$run --seccomp strict -- /b/sysloop $loop"
done
