#!/bin/sh
# build.sh builds the kube-apiserver and etcd that the integration suite's
# private Kubernetes API runs on (integration/kubeapi_test.go), and prints
# the directory they are in on its last line.
#
# Both come from their Go modules, through the Go module proxy like every
# other dependency (no release tarball can be fetched here): a wrapper
# module in the cache directory requires k8s.io/kubernetes and the etcd
# server it pins, and maps each of kubernetes' ./staging/ replaces to the
# published k8s.io/<repo> module of the same release (v1.X.Y ships them as
# v0.X.Y), which is what the staging directories are. The first build takes
# 6 to 10 minutes on 2 cores and adds about 2.5 GB to the Go build cache and
# 0.6 GB to the module cache (kept: a rebuild then takes seconds); after
# that both binaries stay in the cache directory, and the script only
# checks that they are there.
#
# Usage: integration/kube/build.sh [--print-dir]
#   --print-dir  only print the directory (the test harness asks it where
#                the binaries are; it builds nothing)
# Binaries go to ${JAIL_KUBE_CACHE:-$HOME/.cache/jail-kube}/<version>/bin.
# Needs: go. Nothing is installed.
set -eu

# The Kubernetes release to test against; the etcd version follows from its
# go.mod.
k8s_version=v1.36.3

cache=${JAIL_KUBE_CACHE:-$HOME/.cache/jail-kube}
# Absolute: the tests ask from integration/, CI and README from the root.
case $cache in /*) ;; *) cache=$PWD/$cache ;; esac
bin=$cache/$k8s_version/bin
case ${1:-} in
--print-dir) echo "$bin"; exit 0 ;;
'') ;;
*) echo "usage: $0 [--print-dir]" >&2; exit 2 ;;
esac
built() { [ -x "$bin/kube-apiserver" ] && [ -x "$bin/etcd" ]; }
if built; then echo "$bin"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: go not found (Go 1.26 or newer)" >&2; exit 1; }
mod=$(dirname "$bin")/mod
mkdir -p "$bin" "$mod"
cd "$mod"
# One build at a time per cache directory (util-linux is essential on
# Debian; without flock, builds are just not serialised).
if command -v flock >/dev/null; then
	exec 9>"$mod/lock"
	flock 9
	if built; then echo "$bin"; exit 0; fi
fi

# The wrapper module is its own: no go.work of a surrounding tree, and
# missing go.sum lines are added as the build finds them.
export GOWORK=off GOFLAGS=-mod=mod

start=$(date +%s)
if [ ! -f go.mod ]; then
	echo "build.sh: building kube-apiserver and etcd $k8s_version (about 10 minutes with a cold Go build cache)" >&2
	kmod=$(go mod download -json "k8s.io/kubernetes@$k8s_version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[ -f "$kmod" ] || { echo "build.sh: no go.mod for k8s.io/kubernetes@$k8s_version" >&2; exit 1; }
	etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$kmod")
	[ -n "$etcd_version" ] || { echo "build.sh: $kmod requires no go.etcd.io/etcd/server/v3" >&2; exit 1; }
	staging_version=v0.${k8s_version#v1.}
	{
		echo "module jail-kube-build"
		echo
		# kubernetes' own go and godebug lines: it is built as its
		# release is.
		grep -E '^(go|godebug) ' "$kmod"
		echo
		echo "require ("
		echo "	k8s.io/kubernetes $k8s_version"
		echo "	go.etcd.io/etcd/server/v3 $etcd_version"
		echo ")"
		echo
		echo "replace ("
		awk -v v="$staging_version" '$2 == "=>" && $3 ~ /^\.\/staging\// { print "\t" $1 " => " $1 " " v }' "$kmod"
		echo ")"
	} >go.mod.new
	[ "$(grep -c ' => ' go.mod.new)" -gt 0 ] || { echo "build.sh: no ./staging replaces in $kmod" >&2; exit 1; }
	mv go.mod.new go.mod
fi

# The version the binaries report (/version, and the version the apiserver
# emulates); without it they say v0.0.0-master.
minor=${k8s_version#v1.}
minor=${minor%%.*}
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
# Into temporary names first: an interrupted build leaves no binary that
# looks finished.
go build -trimpath -ldflags "$ldflags" -o "$bin/kube-apiserver.new" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "-s -w" -o "$bin/etcd.new" go.etcd.io/etcd/server/v3
mv "$bin/kube-apiserver.new" "$bin/kube-apiserver"
mv "$bin/etcd.new" "$bin/etcd"
echo "build.sh: built in $(($(date +%s) - start)) s" >&2
echo "$bin"
