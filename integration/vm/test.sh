#!/usr/bin/env bash
# Usage: integration/vm/test.sh
#
# Runs jail's cgroup v2 tests in the VM of run.sh, on any host: builds from
# this checkout a static jail, the static probe, the integration test binary
# and, when ./cgroup exists, the cgroup package's test binary; checks in the
# guest that /sys/fs/cgroup is cgroup2 with the memory, pids and cpu
# controllers; then runs
#   JAIL_IT_PREBUILT=/jail-it ./integration.test -test.v -test.run "$JAIL_VM_RUN"
#                                    (in /jail-it/integration; jail and probe in /jail-it)
#   ./cgroup.test -test.v            (in /jail-it/cgroup, beside its testdata)
# It passes only if each binary exits 0 and prints at least one "--- PASS"
# and no "--- FAIL" or "--- SKIP" line: a pattern that matches nothing, or a
# test that skips because it could not run, fails.
#
# Environment:
#   JAIL_VM_RUN      -test.run pattern for integration.test (default Cgroup)
#   JAIL_VM_TIMEOUT  seconds for the whole VM run (default 1800)
#   JAIL_VM_CGROUP_TEST  0: do not run cgroup.test (default 1)
#   JAIL_VM_HOST_TOOLS   host programs to ship, with their libraries, for
#                    the tests (default "ip mkfs.ext4": the network tests'
#                    namespaces, and the project-quota file system)
#   and run.sh's (JAIL_VM_CACHE, JAIL_VM_ACCEL, JAIL_VM_CONSOLE, ...)
#
# Exit status: 0 all passed; 1 a build or a test failed (the last line says
# which); 99 the VM failed (run.sh's infrastructure code); 130/143 interrupted.
# Needs go, gcc and the static libc (libc6-dev), musl-tools and gperf (build.sh),
# plus run.sh's requirements.
set -euo pipefail

readonly EXIT_INFRA=99
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
run=${JAIL_VM_RUN:-Cgroup}
vm_timeout=${JAIL_VM_TIMEOUT:-1800}
[[ $vm_timeout =~ ^[1-9][0-9]*$ ]] || { echo "test.sh: JAIL_VM_TIMEOUT: want seconds, got '$vm_timeout'" >&2; exit 2; }

fail() {
	echo "test.sh: FAIL: $*" >&2
	exit 1
}

out=$(mktemp -d "${TMPDIR:-/tmp}/jail-vm-test.XXXXXX")
vm_pid='' tail_pid=''
# stop ends run.sh (which stops its VM) and the tail that shows its output.
# run.sh runs in the background, where SIGINT is ignored, so a Ctrl-C
# reaches it only through here.
stop() {
	if [ -n "$vm_pid" ]; then kill -TERM "$vm_pid" 2>/dev/null || true; wait "$vm_pid" 2>/dev/null || true; fi
	if [ -n "$tail_pid" ]; then kill "$tail_pid" 2>/dev/null || true; wait "$tail_pid" 2>/dev/null || true; fi
	vm_pid='' tail_pid=''
}
trap 'stop; rm -rf "$out"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------
# Build. Static, because the guest has no libc: busybox is all it has.

for c in go gcc; do
	command -v "$c" >/dev/null || fail "$c not found (needs go, gcc and libc6-dev)"
done
static=(-tags 'osusergo,netgo' -ldflags '-linkmode external -extldflags -static')
binaries=(integration.test)
cd "$repo"
echo "test.sh: building static jail, probe and test binaries" >&2
./build.sh -o "$out/jail" || fail "build.sh (the release build: static, musl)"
gcc -static -O2 -o "$out/probe" integration/testdata/probe.c || fail "gcc -static probe.c (needs libc6-dev)"
# Each test binary in a directory of its own, as go test runs a package's
# tests in the package's directory (where its testdata is). And the
# integration suite's binDir (/jail-it, with jail and probe) must not hold
# integration.test: TestUnprivileged copies the running binary there.
mkdir "$out/integration"
CGO_ENABLED=1 go test -c "${static[@]}" -o "$out/integration/integration.test" ./integration || fail "go test -c ./integration"
files=("$out/jail" "$out/probe" "$out/integration")

# Host programs the tests run that busybox lacks (iproute2's ip: network
# namespaces, veth pairs), shipped with their shared libraries into
# /jail-it/tools: real/NAME is the program (its own name: ip reads argv[0]),
# run by the host's dynamic loader from lib/, through the wrapper bin/NAME
# first on the guest's PATH.
mkdir -p "$out/tools/bin" "$out/tools/lib" "$out/tools/real"
for t in ${JAIL_VM_HOST_TOOLS-ip mkfs.ext4}; do
	p=$(command -v "$t") || fail "$t not found on this host (JAIL_VM_HOST_TOOLS)"
	cp -L "$p" "$out/tools/real/$t"
	ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
		if [[ $lib == */ld-linux* ]]; then cp -L "$lib" "$out/tools/lib/ld.so"; else cp -L "$lib" "$out/tools/lib/"; fi
	done
	[ -f "$out/tools/lib/ld.so" ] || fail "no dynamic loader for $p"
	printf '#!/bin/sh\nexec /jail-it/tools/lib/ld.so --library-path /jail-it/tools/lib /jail-it/tools/real/%s "$@"\n' "$t" >"$out/tools/bin/$t"
	chmod 0755 "$out/tools/bin/$t"
done
files+=("$out/tools")
if [ -d cgroup ] && [ "${JAIL_VM_CGROUP_TEST:-1}" != 0 ]; then
	mkdir "$out/cgroup"
	CGO_ENABLED=1 go test -c "${static[@]}" -o "$out/cgroup/cgroup.test" ./cgroup || fail "go test -c ./cgroup"
	if [ -d cgroup/testdata ]; then cp -R cgroup/testdata "$out/cgroup/"; fi
	files+=("$out/cgroup")
	binaries+=(cgroup.test)
fi

# Each binary gets an equal share of the VM's time, less a minute for boot
# and for go's goroutine dump at -test.timeout, which beats a killed VM.
test_timeout=$(((vm_timeout - 60) / ${#binaries[@]}))
((test_timeout > 0)) || fail "JAIL_VM_TIMEOUT=$vm_timeout leaves no time for the tests"

# The guest's side: busybox sh, in /jail-it.
cat >"$out/vm-test.sh" <<'EOF'
#!/bin/sh
# vm-test.sh RUN TIMEOUT: check the cgroup v2 setup, then run the tests.
run=$1 timeout=$2
fatal() {
	echo "vm-test: FATAL: $*"
	exit 3
}
fstype=$(stat -f -c %t /sys/fs/cgroup) || fatal "stat -f /sys/fs/cgroup"
[ "$fstype" = 63677270 ] || fatal "/sys/fs/cgroup is not cgroup2: file system type 0x$fstype, want 0x63677270"
for c in memory pids cpu; do
	grep -qw "$c" /sys/fs/cgroup/cgroup.controllers || fatal "no $c controller in /sys/fs/cgroup/cgroup.controllers"
	grep -qw "$c" /sys/fs/cgroup/cgroup.subtree_control || fatal "$c is not enabled in /sys/fs/cgroup/cgroup.subtree_control"
done
echo "vm-test: cgroup2 at /sys/fs/cgroup; controllers: $(cat /sys/fs/cgroup/cgroup.controllers); kernel $(uname -r)"
# The integration suite's hostDir makes its temp dirs in $binDir/work, which
# TestMain creates only when it builds jail itself.
mkdir -m 1777 work || fatal "mkdir /jail-it/work"
export PATH=/jail-it/tools/bin:$PATH
# Loop-mounted ext4s with project quotas, for the dir workspace's size
# (TestSessionDirWorkspace): JAIL_IT_QUOTA_DIR enforces them (prjquota),
# where the size must hold; JAIL_IT_QUOTA_UNENFORCED_DIR only counts
# them (mounted without prjquota), where the session must be refused.
if command -v mkfs.ext4 >/dev/null; then
	modprobe loop 2>/dev/null; modprobe ext4 2>/dev/null # modules here; built in elsewhere
	for q in quota:prjquota quota-unenforced:defaults; do
		name=${q%%:*} opts=${q#*:}
		dd if=/dev/zero of="/jail-it/$name.img" bs=1M count=0 seek=64 2>/dev/null || fatal "$name.img"
		mkfs.ext4 -q -O quota,project -E quotatype=prjquota "/jail-it/$name.img" || fatal "mkfs.ext4 -O quota,project $name.img"
		mkdir -m 1777 "/jail-it/work/$name" && mount -t ext4 -o "loop,$opts" "/jail-it/$name.img" "/jail-it/work/$name" ||
			fatal "mount -o loop,$opts $name.img (an ext4 with project quotas)"
		chmod 1777 "/jail-it/work/$name"
	done
	export JAIL_IT_QUOTA_DIR=/jail-it/work/quota JAIL_IT_QUOTA_UNENFORCED_DIR=/jail-it/work/quota-unenforced
	echo "vm-test: ext4 with project quotas enforced at $JAIL_IT_QUOTA_DIR, only counted at $JAIL_IT_QUOTA_UNENFORCED_DIR"
fi
rc=0
echo "### vm-test: begin integration.test"
(cd integration && JAIL_IT_PREBUILT=/jail-it ./integration.test -test.v -test.timeout "${timeout}s" -test.run "$run")
r=$?
echo "### vm-test: end integration.test rc=$r"
[ $r = 0 ] || rc=1
if [ -d cgroup ]; then
	echo "### vm-test: begin cgroup.test"
	(cd cgroup && ./cgroup.test -test.v -test.timeout "${timeout}s")
	r=$?
	echo "### vm-test: end cgroup.test rc=$r"
	[ $r = 0 ] || rc=1
fi
# No jail outlives the tests, nor its cgroup: each suite's own end check
# counts only what it can tell is its own. Nothing ran here before them.
leftover() {
	find /sys/fs/cgroup -type d -name 'jail-*' -prune 2>/dev/null | sed 's/^/cgroup /'
	for d in /proc/[0-9]*; do
		a=$(tr '\0' '\n' <"$d/cmdline" 2>/dev/null | head -n1)
		case $a in jail:init | jail:exec) grep -q '^State:.*Z' "$d/status" 2>/dev/null || echo "process ${d#/proc/} $a" ;; esac
	done
}
for _ in $(seq 50); do [ -z "$(leftover)" ] && break; sleep 0.1; done
left=$(leftover)
if [ -n "$left" ]; then
	echo "vm-test: FATAL: jail processes or cgroups outlived the tests: $(echo $left)"
	rc=1
fi
exit $rc
EOF
chmod 0755 "$out/vm-test.sh"
files+=("$out/vm-test.sh")

# ---------------------------------------------------------------------------
# Run, streaming the output and keeping it for the checks.

log=$out/vm.log
"$here/run.sh" --timeout "$vm_timeout" "${files[@]}" -- ./vm-test.sh "$run" "$test_timeout" >"$log" &
vm_pid=$!
# tail --pid reads to the end once run.sh is gone.
tail -n +1 -s 0.2 -f --pid="$vm_pid" "$log" &
tail_pid=$!
rc=0
wait "$vm_pid" || rc=$?
vm_pid=''
wait "$tail_pid" || true
tail_pid=''
case $rc in
"$EXIT_INFRA") echo "test.sh: the VM failed (run.sh exit $EXIT_INFRA); no test result" >&2; exit "$EXIT_INFRA" ;;
129 | 130 | 143) exit "$rc" ;;
esac
if grep -q '^vm-test: FATAL: ' "$log"; then
	fail "$(grep '^vm-test: FATAL: ' "$log" | head -n1 | sed 's/^vm-test: FATAL: //')"
fi

problems=()
summary=()
for b in "${binaries[@]}"; do
	section=$(sed -n "/^### vm-test: begin $b\$/,/^### vm-test: end $b rc=/p" "$log")
	end=$(grep "^### vm-test: end $b rc=" <<<"$section" || true)
	if [ -z "$end" ]; then
		problems+=("$b: did not finish")
		continue
	fi
	passed=$(grep -c -e '--- PASS' <<<"$section" || true)
	failed=$(grep -c -e '--- FAIL' <<<"$section" || true)
	skipped=$(grep -c -e '--- SKIP' <<<"$section" || true)
	summary+=("$b: $passed passed, $failed failed, $skipped skipped, ${end##* }")
	if [ "${end##*rc=}" != 0 ]; then problems+=("$b: exit ${end##*rc=}"); fi
	if [ "$passed" = 0 ]; then problems+=("$b: no test passed (does -test.run '$run' match any test?)"); fi
	if [ "$failed" != 0 ]; then problems+=("$b: $failed --- FAIL lines"); fi
	if [ "$skipped" != 0 ]; then problems+=("$b: $skipped --- SKIP lines (in the VM every test must run)"); fi
done
printf 'test.sh: %s\n' "${summary[@]}" >&2
if [ ${#problems[@]} -gt 0 ]; then
	msg=$(printf '%s; ' "${problems[@]}")
	fail "${msg%; }"
fi
if [ "$rc" != 0 ]; then fail "the VM command exited $rc"; fi
echo "test.sh: PASS (in the cgroup v2 VM: ${binaries[*]})" >&2
