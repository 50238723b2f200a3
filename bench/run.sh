#!/usr/bin/env bash
# run.sh measures jail's start-up cost against a floor and a peer:
#
#   floor  unshare -Urpf --mount-proc -n -i -u /bin/true  (the namespaces alone)
#   jail   jail run --profile strict -- /bin/true
#   bwrap  bubblewrap with a comparable sandbox (skipped when not installed)
#   session-exec  jail session exec ID -- /bin/true, into a strict session
#                 made before the rounds (the join: no namespaces are made)
#   jail-before   with -b, another jail binary's run (before/after a change)
#
# The contenders run interleaved (each round runs each once, the order rotated
# per round) under bench/cmd/benchrun, which times every run from fork to
# wait4 without a shell in between. With -t, it then measures throughput:
# rounds of a batch of runs per contender with 8 in flight (floor, jail,
# jail-before, bwrap; session-exec is left out). Then it reads the PSS of a
# running jail. See bench/README.md for what the figures mean.
#
# Usage: sudo bench/run.sh [-n ROUNDS] [-w WARMUP] [-t ROUNDSxBATCH] [-j JAIL] [-b BEFORE] [-o OUTDIR]
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: run.sh [-n ROUNDS] [-w WARMUP] [-t ROUNDSxBATCH] [-j JAIL] [-b BEFORE] [-o OUTDIR]
  -n ROUNDS  measured rounds (default 200)
  -w WARMUP  warm-up rounds, not recorded (default 20)
  -t ROUNDSxBATCH  then throughput: ROUNDS rounds of BATCH runs per contender with 8 in flight,
             after one warm-up round (e.g. 10x200: 2,000 runs each; default: not measured)
  -j JAIL    jail binary (default: $JAIL, else ./jail, else built statically into a temporary directory)
  -b BEFORE  another jail binary, measured as "jail-before" in the same rounds (a change's before/after)
  -o OUTDIR  where samples.csv (and throughput.csv with -t) go (default: a new temporary directory)
EOF
}

rounds=200
warmup=20
jail_bin="${JAIL:-}"
outdir=""
before=""
throughput=""
while getopts "n:w:t:j:b:o:h" opt; do
	case "$opt" in
	n) rounds="$OPTARG" ;;
	w) warmup="$OPTARG" ;;
	t) throughput="$OPTARG" ;;
	j) jail_bin="$OPTARG" ;;
	b) before="$OPTARG" ;;
	o) outdir="$OPTARG" ;;
	h)
		usage
		exit 0
		;;
	*)
		usage >&2
		exit 2
		;;
	esac
done
shift $((OPTIND - 1))
if (($# > 0)); then
	usage >&2
	exit 2
fi
if [[ -n "$throughput" && ! "$throughput" =~ ^[1-9][0-9]*x[1-9][0-9]*$ ]]; then
	echo "run.sh: -t wants ROUNDSxBATCH, e.g. 10x200" >&2
	exit 2
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/jail-bench.XXXXXX")"
session=""
cleanup() {
	if [[ -n "$session" ]]; then "$jail_bin" session rm --state-dir "$tmp/sessions" "$session" >/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
if [[ -z "$outdir" ]]; then
	outdir="$(mktemp -d "${TMPDIR:-/tmp}/jail-bench-out.XXXXXX")"
fi
mkdir -p "$outdir"

if ! command -v go >/dev/null; then
	echo "run.sh: go is not in PATH (sudo resets PATH; try: sudo env PATH=\"\$PATH\" bench/run.sh)" >&2
	exit 1
fi
if ((EUID != 0)); then
	echo "run.sh: not root: jail and the floor may fail or measure something else (run with sudo)" >&2
fi

(cd "$repo" && go build -o "$tmp/benchrun" ./bench/cmd/benchrun)
if [[ -z "$jail_bin" && -x ./jail ]]; then
	jail_bin=./jail
fi
if [[ -z "$jail_bin" ]]; then
	# The release build (build.sh): static musl, as users run it.
	echo "building jail into $tmp/jail" >&2
	"$repo/build.sh" -o "$tmp/jail"
	jail_bin="$tmp/jail"
fi
# How a binary's pages came into the page cache moves its start by up to
# 0.15x the floor (bench/README.md, "The binary's page cache"): the same
# bytes run faster written by the linker or by cp than read back by exec's
# page faults after an eviction. Every jail measured is therefore a copy
# made here, so that all are alike (and like a binary just installed).
jail_src="$jail_bin"
cp "$jail_bin" "$tmp/jail-measured"
jail_bin="$tmp/jail-measured"

# A strict session for the join: made once, removed on exit.
session="$("$jail_bin" session create --state-dir "$tmp/sessions" --profile strict)"
contenders=(
	-c "floor=unshare -Urpf --mount-proc -n -i -u /bin/true"
	-c "jail=$jail_bin run --profile strict -- /bin/true"
	-c "session-exec=$jail_bin session exec --state-dir $tmp/sessions $session -- /bin/true"
)
# The throughput contenders: the same without the join (8 commands in
# flight into one session ask something else of it).
tcontenders=("${contenders[@]:0:4}")
if [[ -n "$before" ]]; then
	cp "$before" "$tmp/jail-before"
	before="$tmp/jail-before"
	contenders+=(-c "jail-before=$before run --profile strict -- /bin/true")
	tcontenders+=(-c "jail-before=$before run --profile strict -- /bin/true")
fi
if command -v bwrap >/dev/null; then
	# Mirror the host's merged-/usr layout: a top-level directory that is a
	# symlink (usr/bin) becomes the same symlink, a real one a read-only bind.
	bwrap_cmd="bwrap --unshare-user --unshare-pid --unshare-net --unshare-ipc --unshare-uts --ro-bind /usr /usr"
	for d in bin lib lib32 lib64 libx32 sbin; do
		if [[ -L "/$d" ]]; then
			bwrap_cmd+=" --symlink $(readlink "/$d") /$d"
		elif [[ -d "/$d" ]]; then
			bwrap_cmd+=" --ro-bind /$d /$d"
		fi
	done
	bwrap_cmd+=" --tmpfs /tmp --proc /proc --dev /dev /bin/true"
	contenders+=(-c "bwrap=$bwrap_cmd")
	tcontenders+=(-c "bwrap=$bwrap_cmd")
else
	echo "note: bwrap not installed; the bwrap contender is skipped" >&2
fi

echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "kernel:  $(uname -r)"
echo "cpu:     $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1) x $(nproc)"
echo "jail:    $jail_src, copied ($("$jail_bin" version 2>/dev/null || echo 'version unknown'))"
if command -v bwrap >/dev/null; then
	echo "bwrap:   $(bwrap --version)"
fi
echo "samples: $outdir/samples.csv"
if [[ -n "$throughput" ]]; then
	echo "throughput samples: $outdir/throughput.csv"
fi
echo

status=0
"$tmp/benchrun" -n "$rounds" -w "$warmup" -base floor -csv "$outdir/samples.csv" "${contenders[@]}" || status=$?
echo
if [[ -n "$throughput" ]]; then
	"$tmp/benchrun" -inflight 8 -n "${throughput%x*}" -batch "${throughput#*x}" -w 1 -base floor \
		-csv "$outdir/throughput.csv" "${tcontenders[@]}" || status=$?
	echo
fi
"$tmp/benchrun" -pss -runs 5 -- "$jail_bin" run --profile strict -- sleep 2 || status=$?
exit "$status"
