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

rounds=40
jail_bin="${JAIL:-}"
while getopts "n:j:h" opt; do
	case "$opt" in
	n) rounds="$OPTARG" ;;
	j) jail_bin="$OPTARG" ;;
	*)
		echo "usage: seccomp.sh [-n ROUNDS] [-j JAIL]" >&2
		exit 2
		;;
	esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/jail-bench-seccomp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp" # the jail's user (host uid 65534 under root) runs sysloop from here

if ! command -v go >/dev/null; then
	echo "seccomp.sh: go is not in PATH (try: sudo env PATH=\"\$PATH\" bench/seccomp.sh)" >&2
	exit 1
fi
(cd "$repo" && go build -o "$tmp/benchrun" ./bench/cmd/benchrun)
gcc -static -O2 -o "$tmp/sysloop" "$repo/bench/testdata/sysloop.c"
printf 'description: allows everything\ndefault_action: allow\nrules: []\n' >"$tmp/allowall.yaml"
chmod 644 "$tmp/allowall.yaml"
if [[ -z "$jail_bin" ]]; then
	(cd "$repo" && CGO_ENABLED=1 go build -tags osusergo,netgo \
		-ldflags '-linkmode external -extldflags -static' -o "$tmp/jail" ./cmd/jail)
	jail_bin="$tmp/jail"
fi
[[ "$jail_bin" == */* ]] || jail_bin="./$jail_bin"

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
