#!/usr/bin/env bash
# Builds the pinned Kubernetes control-plane binaries that the tests and the
# lab run: etcd, kube-apiserver, kube-controller-manager, kube-proxy, kubectl,
# and the kubelet that the lab's real node (drainscope lab --node kubelet) runs.
#
# They are built from the Go module proxy by the separate module in
# hack/k8sbin (k8s.io/kubernetes stays out of the project's go.mod) into
#
#   ${DRAINSCOPE_CACHE:-$HOME/.cache/drainscope}/k8s/<version>/bin
#
# and that directory is printed on stdout as the last line, so
#
#   export DRAINSCOPE_K8S_BIN=$(scripts/k8s-binaries.sh)
#
# works. Progress goes to stderr. A binary already built from the same
# hack/k8sbin inputs is kept, so a second run does nothing; concurrent runs
# wait for each other. On a fresh machine the first run takes several minutes
# (kube-apiserver alone ~4-5 min on 2 cores, downloads included).
#
# Usage: scripts/k8s-binaries.sh [binary ...]   (default: all six)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/hack/k8sbin"
version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "$mod/go.mod")
if [[ -z "$version" ]]; then
	echo "k8s-binaries: cannot read the k8s.io/kubernetes version from $mod/go.mod" >&2
	exit 1
fi
cache="${DRAINSCOPE_CACHE:-$HOME/.cache/drainscope}"
bin="$cache/k8s/$version/bin"
mkdir -p "$bin"

all=(etcd kube-apiserver kube-controller-manager kube-proxy kubectl kubelet)
want=("$@")
if [[ ${#want[@]} -eq 0 ]]; then
	want=("${all[@]}")
fi

log() { printf 'k8s-binaries: %s\n' "$*" >&2; }

# One build at a time per cache directory: a second caller waits, then finds
# the binaries built and skips them.
exec 9>"$bin/.lock"
if ! flock -n 9; then
	log "another build holds $bin/.lock; waiting"
	flock 9
fi

minor=${version#v1.}
minor=${minor%%.*}
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"

# The stamp ties a binary to everything that decides its content: the
# module's requirements, the etcd main, the link flags and the Go release.
stamp=$({ cat "$mod/go.mod" "$mod/go.sum" "$mod/etcd/main.go"; echo "$ldflags"; } | sha256sum | cut -c1-16)
stamp="$stamp $(go env GOVERSION)"
# The kubelet comes from its own module (hack/kubelet: the same release, more
# dependencies), so that adding it left the other binaries' stamps alone.
kmod="$root/hack/kubelet"
kstamp=$({ cat "$kmod/go.mod" "$kmod/go.sum"; echo "$ldflags"; } | sha256sum | cut -c1-16)
kstamp="$kstamp $(go env GOVERSION)"

pkg() {
	case "$1" in
	etcd) echo ./etcd ;;
	kube-apiserver | kube-controller-manager | kube-proxy | kubectl | kubelet) echo "k8s.io/kubernetes/cmd/$1" ;;
	*) return 1 ;;
	esac
}

total_start=$SECONDS
n=0
for name in "${want[@]}"; do
	n=$((n + 1))
	p=$(pkg "$name") || {
		log "unknown binary $name (want one of: ${all[*]})"
		exit 2
	}
	dir=$mod want_stamp=$stamp
	if [[ $name == kubelet ]]; then
		dir=$kmod want_stamp=$kstamp
	fi
	if [[ -x "$bin/$name" && -f "$bin/.$name.stamp" && "$(cat "$bin/.$name.stamp")" == "$want_stamp" ]]; then
		log "[$n/${#want[@]}] $name $version: up to date"
		continue
	fi
	log "[$n/${#want[@]}] $name $version: building (go build $p)"
	start=$SECONDS
	# A heartbeat, so a long silent compile is not mistaken for a hang.
	(
		while sleep 30; do
			log "      $name: still building, $((SECONDS - start)) s"
		done
	) &
	beat=$!
	rc=0
	(cd "$dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$bin/.$name.tmp" "$p") || rc=$?
	kill "$beat" 2>/dev/null || true
	wait "$beat" 2>/dev/null || true
	if [[ $rc -ne 0 ]]; then
		rm -f "$bin/.$name.tmp"
		log "[$n/${#want[@]}] $name: build failed (exit $rc)"
		exit "$rc"
	fi
	mv -f "$bin/.$name.tmp" "$bin/$name"
	echo "$want_stamp" >"$bin/.$name.stamp"
	log "[$n/${#want[@]}] $name: built in $((SECONDS - start)) s"
done
log "done in $((SECONDS - total_start)) s"
echo "$bin"
