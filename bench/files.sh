#!/usr/bin/env bash
# files.sh measures moving files in and out of a session, interleaved
# (bench/cmd/benchrun), against the two ways a caller has without it:
#
#   cp         a plain host copy (the floor: no jail at all)
#   put, get   jail session put / get (the files helper joins the session)
#   exec       the same bytes through `jail session exec -i ... cat` (or
#              tar, for a tree): a command in the jail as the carrier
#
# for one file of 1 KiB, 1 MiB and 100 MiB and a tree of 1,000 files of
# 1 KiB, and then the time to snapshot and fork a session per MB of its
# workspace (tmpfs, a dir on ext4, a dir on xfs with reflinks, overlay),
# with how long its processes were stopped.
#
# Usage: sudo bench/files.sh [-n ROUNDS] [-j JAIL]
set -euo pipefail

bench_rounds=20
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

export JAIL_STATE_DIR="$tmp/state" JAIL_SNAPSHOT_DIR="$tmp/snapshots"
id=$("$jail_bin" session create --profile default --workspace tmpfs:1G --rlimit fsize=unlimited)
trap '"$jail_bin" session rm "$id" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

# script NAME BODY makes an executable $tmp/NAME.sh (benchrun splits its
# commands on blanks: redirections need a script).
script() {
	printf '#!/bin/sh\nset -e\n%s\n' "$2" >"$tmp/$1.sh"
	chmod 755 "$tmp/$1.sh"
}

for size in 1K 1M 100M; do
	src="$tmp/src-$size"
	head -c "$size" /dev/urandom >"$src"
	script "cp-$size" "cp $src $tmp/cp-out"
	script "put-$size" "exec $jail_bin session put $id $src /workspace/f-$size"
	script "exec-put-$size" "exec $jail_bin session exec -i $id -- sh -c 'cat > /workspace/e-$size' < $src"
	script "get-$size" "exec $jail_bin session get $id /workspace/f-$size $tmp/get-out"
	script "exec-get-$size" "exec $jail_bin session exec $id -- cat /workspace/f-$size > $tmp/get-out"
	"$tmp/put-$size.sh" # for the first get
	echo "== one file of $size: in =="
	"$tmp/benchrun" -n "$rounds" -w 3 -base cp -c "cp=$tmp/cp-$size.sh" -c "put=$tmp/put-$size.sh" -c "exec=$tmp/exec-put-$size.sh"
	echo
	echo "== one file of $size: out =="
	"$tmp/benchrun" -n "$rounds" -w 3 -base cp -c "cp=$tmp/cp-$size.sh" -c "get=$tmp/get-$size.sh" -c "exec=$tmp/exec-get-$size.sh"
	echo
done

tree="$tmp/tree"
for d in $(seq 0 9); do
	mkdir -p "$tree/d$d"
	for f in $(seq 0 99); do head -c 1K /dev/urandom >"$tree/d$d/f$f"; done
done
script cp-tree "rm -rf $tmp/cp-tree && cp -r $tree $tmp/cp-tree"
script put-tree "exec $jail_bin session put $id $tree /workspace/"
script exec-put-tree "tar -C $tree -c . | $jail_bin session exec -i $id -- tar -x -C /workspace/tree"
script get-tree "rm -rf $tmp/get-tree && exec $jail_bin session get $id /workspace/tree $tmp/get-tree"
script exec-get-tree "rm -rf $tmp/get-tree && mkdir $tmp/get-tree && $jail_bin session exec $id -- tar -c -C /workspace/tree . | tar -x -C $tmp/get-tree"
"$tmp/put-tree.sh"
echo "== a tree of 1,000 files of 1 KiB: in =="
"$tmp/benchrun" -n "$rounds" -w 3 -base cp -c "cp=$tmp/cp-tree.sh" -c "put=$tmp/put-tree.sh" -c "exec=$tmp/exec-put-tree.sh"
echo
echo "== a tree of 1,000 files of 1 KiB: out =="
"$tmp/benchrun" -n "$rounds" -w 3 -base cp -c "cp=$tmp/cp-tree.sh" -c "get=$tmp/get-tree.sh" -c "exec=$tmp/exec-get-tree.sh"
echo

# median of the numbers on stdin.
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now() { date +%s%N; }

# Workspaces to snapshot: tmpfs; a dir workspace on this machine's file
# system for $tmp (ext4 here: a tar); as root with xfsprogs, a dir
# workspace on a loop-mounted xfs beside its snapshots (reflinks); and as
# root on Linux 6.6, an overlay workspace with the data in /usr/local.
kinds="tmpfs dir"
chmod 711 "$tmp" # a dir workspace's host id goes through it
if [ "$(id -u)" = 0 ] && command -v mkfs.xfs >/dev/null; then
	truncate -s 1G "$tmp/xfs.img"
	mkfs.xfs -q -m reflink=1 "$tmp/xfs.img"
	mkdir "$tmp/xfs"
	mount -o loop "$tmp/xfs.img" "$tmp/xfs"
	trap 'umount "$tmp/xfs" 2>/dev/null; "$jail_bin" session rm "$id" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
	kinds="$kinds xfs"
fi
if "$jail_bin" check 2>/dev/null | grep -q '^ok *overlay workspace'; then
	kinds="$kinds overlay"
fi

echo "== snapshot and fork (create --from), per MB of workspace =="
printf '%-18s %12s %12s %14s %12s %14s\n' workspace "snapshot ms" "frozen ms" "snapshot ms/MB" "fork ms" "fork ms/MB"
for kind in $kinds; do
	data=data snaps=$tmp/snapshots wsdir=()
	case $kind in
	tmpfs) ws=(--workspace tmpfs:300M) ;;
	dir) ws=(--workspace dir:300M --allow-unenforced) wsdir=(--workspace-dir "$tmp/workspaces") ;;
	xfs) ws=(--workspace dir:300M --allow-unenforced) wsdir=(--workspace-dir "$tmp/xfs/workspaces") snaps=$tmp/xfs/snapshots ;;
	overlay) ws=(--workspace overlay:300M) data=/usr/local/data ;;
	esac
	for mb in 10 100; do
		s=$("$jail_bin" session create --profile default "${ws[@]}" "${wsdir[@]}" --rlimit fsize=unlimited)
		"$jail_bin" session exec "$s" -- sh -c "head -c ${mb}M /dev/urandom > $data"
		: >"$tmp/snap.txt"
		: >"$tmp/frozen.txt"
		: >"$tmp/fork.txt"
		for _ in $(seq 5); do
			t0=$(now)
			json=$(JAIL_SNAPSHOT_DIR=$snaps "$jail_bin" session snapshot --json "$s")
			t1=$(now)
			echo $(((t1 - t0) / 1000)) >>"$tmp/snap.txt"
			echo "$json" | sed -n 's/.*"freeze_ms": \([0-9]*\).*/\1/p' >>"$tmp/frozen.txt"
			snap=$(echo "$json" | sed -n 's/.*"id": "\(snap-[0-9a-f]*\)".*/\1/p')
			copy=$(echo "$json" | sed -n 's/.*"copy": "\([a-z]*\)".*/\1/p')
			t0=$(now)
			f=$(JAIL_SNAPSHOT_DIR=$snaps "$jail_bin" session create --from "$snap" "${wsdir[@]}")
			t1=$(now)
			echo $(((t1 - t0) / 1000)) >>"$tmp/fork.txt"
			"$jail_bin" session rm "$f" >/dev/null
			JAIL_SNAPSHOT_DIR=$snaps "$jail_bin" snapshot rm "$snap"
		done
		"$jail_bin" session rm "$s" >/dev/null
		sm=$(median <"$tmp/snap.txt")
		fm=$(median <"$tmp/fork.txt")
		fz=$(median <"$tmp/frozen.txt")
		awk -v k="$kind ($copy)" -v mb="$mb" -v sm="$sm" -v fz="$fz" -v fm="$fm" 'BEGIN {printf "%-18s %12.1f %12d %14.2f %12.1f %14.2f\n", k " " mb " MB", sm/1000, fz, sm/1000/mb, fm/1000, fm/1000/mb}'
	done
done
