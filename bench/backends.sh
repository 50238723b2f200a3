#!/usr/bin/env bash
# backends.sh measures what the Docker backend adds to the engine's own
# cost, and what each backend costs for the same strict /bin/true:
#
#   docker-run   docker run --rm with the options jail's create body has
#                (read-only image root, no capabilities, no_new_privs, the
#                strict seccomp policy, no network, init, uid 1000, sized
#                /tmp and /dev/shm, the rlimits, no log driver)
#   jail-docker  jail run --backend docker --image IMAGE --profile strict
#   native       jail run --profile strict (this host's kernel)
#
# interleaved under bench/cmd/benchrun, docker-run the base: jail-docker's
# ratio is the adapter's cost (issue 14's target: at most 1.05x). The engine
# is a private dockerd started here in new mount, network and pid namespaces
# (as integration/dockerd_test.go starts the tests' one: no docker0, no
# NAT, nothing of it left), with an image of static busybox imported into
# it. The Kubernetes backend's API-side cost is measured by
# `go test -run '^$' -bench K8sRun ./integration/` (a cluster here has no
# node). See bench/README.md.
#
# Usage: sudo env PATH="$PATH" bench/backends.sh [-n ROUNDS] [-j JAIL]
set -euo pipefail
bench_rounds=40
bench_usage="[-n ROUNDS] [-j JAIL]"
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

for c in dockerd busybox docker unshare; do
	command -v "$c" >/dev/null || { echo "$name: needs $c (apt-get install docker.io busybox-static util-linux)" >&2; exit 1; }
done
docker_cli=$(command -v docker)

# The private engine: everything below $tmp, its cgroups below ours
# (a relative --cgroup-parent, removed at exit).
cg="jailbench-docker-$$"
unshare_pid=""
stop_dockerd() {
	# dockerd is unshare's child (PID 1 of the new pid namespace): ended
	# by its pid, then unshare ends by itself.
	local d
	d=$(pgrep -P "$unshare_pid" 2>/dev/null || true)
	if [[ -n "$d" ]]; then
		kill -TERM "$d" 2>/dev/null || true
		for _ in $(seq 200); do kill -0 "$d" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$d" 2>/dev/null || true
	fi
	if [[ -n "$unshare_pid" ]]; then wait "$unshare_pid" 2>/dev/null || true; fi
	# Deepest first; only the groups this script's daemon made.
	find /sys/fs/cgroup -depth -type d -name "$cg" 2>/dev/null | while read -r d; do
		find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap stop_dockerd EXIT
mkdir -p "$tmp/docker/tmp"
printf '{"deprecated-key-path": "%s/docker/key.json"}\n' "$tmp" >"$tmp/docker/daemon.json"
# dockerd is PID 1 of its pid namespace: when it ends, containerd and the
# shims end with it. /run and /opt are hidden behind tmpfs, where dockerd
# and containerd would otherwise leave files on the host.
env -i PATH="$PATH:/usr/sbin:/sbin" TMPDIR="$tmp/docker/tmp" unshare --mount --net --pid --fork --kill-child --propagation private -- sh -c '
	mount -n -t proc proc /proc
	mount -n -t tmpfs -o mode=755 tmpfs /run
	if [ -d /opt ]; then mount -n -t tmpfs -o mode=755 tmpfs /opt; fi
	ip link set lo up
	exec "$@"' sh dockerd --config-file "$tmp/docker/daemon.json" --data-root "$tmp/docker/data" \
	--exec-root "$tmp/docker/exec" --pidfile "$tmp/docker/dockerd.pid" --host "unix://$tmp/docker/docker.sock" \
	--containerd-namespace jailbench --containerd-plugins-namespace jailbench-plugins \
	--bridge=none --iptables=false --ip6tables=false --exec-opt native.cgroupdriver=cgroupfs --cgroup-parent "$cg" \
	>"$tmp/docker/dockerd.log" 2>&1 &
unshare_pid=$!
export DOCKER_HOST="unix://$tmp/docker/docker.sock"
for _ in $(seq 300); do
	"$docker_cli" version >/dev/null 2>&1 && break
	sleep 0.1
done
"$docker_cli" version >/dev/null 2>&1 || { tail -20 "$tmp/docker/dockerd.log" >&2; exit 1; }

# The image: static busybox, /bin/true among its applets.
root="$tmp/rootfs"
mkdir -p "$root/bin" "$root/tmp" "$root/proc" "$root/sys" "$root/dev" "$root/etc"
chmod 1777 "$root/tmp"
cp "$(command -v busybox)" "$root/bin/busybox"
for a in sh true; do ln -s busybox "$root/bin/$a"; done
printf 'root:x:0:0::/:/bin/sh\nuser:x:1000:1000::/tmp:/bin/sh\n' >"$root/etc/passwd"
tar -C "$root" -c . | "$docker_cli" import - jail-bench:1 >/dev/null

# docker run with what jail's create body says (bench/README.md lists the
# difference: jail also masks /sys and its own /proc list).
"$jail_bin" seccomp export strict >"$tmp/strict.json"
docker_run="$docker_cli run --rm --read-only --cap-drop ALL --security-opt no-new-privileges --security-opt seccomp=$tmp/strict.json"
docker_run+=" --network none --ipc private --cgroupns private --init --user 1000:1000 --hostname jail --workdir /tmp"
docker_run+=" --tmpfs /tmp:rw,nosuid,nodev,mode=1777,size=67108864,exec --shm-size 16777216 --log-driver none"
for u in nofile=1024:1024 core=0:0 fsize=67108864:67108864 stack=8388608:8388608 sigpending=256:256 msgqueue=65536:65536 memlock=1048576:1048576 nproc=4096:4096; do
	docker_run+=" --ulimit $u"
done
docker_run+=" jail-bench:1 /bin/true"

echo "date:    $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "kernel:  $(uname -r)"
echo "cpu:     $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1) x $(nproc)"
echo "engine:  dockerd $("$docker_cli" version --format '{{.Server.Version}}' 2>/dev/null), API $("$docker_cli" version --format '{{.Server.APIVersion}}' 2>/dev/null)"
echo "jail:    $jail_bin ($("$jail_bin" version 2>/dev/null || echo 'version unknown'))"
echo
"$tmp/benchrun" -n "$rounds" -w 3 -base docker-run \
	-c "docker-run=$docker_run" \
	-c "jail-docker=$jail_bin run --backend docker --image jail-bench:1 --profile strict -- /bin/true" \
	-c "native=$jail_bin run --profile strict -- /bin/true"
left=$("$docker_cli" ps -aq | wc -l)
if ((left != 0)); then
	echo "$name: $left containers left on the engine" >&2
	exit 1
fi
