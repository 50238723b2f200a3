# lib.sh: the set-up bench/cgroup.sh, bench/seccomp.sh and bench/soak.sh
# share. Source it after `set -euo pipefail`; it reads -n ROUNDS and -j JAIL
# from "$@" (up to a `--`: $OPTIND is where the rest begins), and leaves
# $rounds, $repo, $tmp (removed at exit), $tmp/$bench_tool and $jail_bin
# (built static into $tmp unless -j or $JAIL names one). A script may set
# before sourcing it: bench_tool, the bench/cmd tool to build (default
# benchrun), bench_rounds, the default of -n (40), and bench_usage.
name=$(basename "$0")
bench_tool="${bench_tool:-benchrun}"
rounds="${bench_rounds:-40}"
jail_bin="${JAIL:-}"
while getopts "n:j:h" opt; do
	case "$opt" in
	n) rounds="$OPTARG" ;;
	j) jail_bin="$OPTARG" ;;
	*)
		echo "usage: $name ${bench_usage:-[-n ROUNDS] [-j JAIL]}" >&2
		exit 2
		;;
	esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/jail-bench-${name%.sh}.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
if ! command -v go >/dev/null; then
	echo "$name: go is not in PATH (try: sudo env PATH=\"\$PATH\" bench/$name)" >&2
	exit 1
fi
(cd "$repo" && go build -o "$tmp/$bench_tool" "./bench/cmd/$bench_tool")
if [[ -z "$jail_bin" ]]; then
	"$repo/build.sh" -o "$tmp/jail" # the release build
	jail_bin="$tmp/jail"
fi
[[ "$jail_bin" == */* ]] || jail_bin="./$jail_bin"
