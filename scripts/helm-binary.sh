#!/usr/bin/env bash
# Builds the pinned helm binary that the deploy tests run (helm lint, helm
# template) from the Go module proxy, by the separate module in hack/helm
# (helm stays out of the project's go.mod), into the directory that holds
# the Kubernetes binaries:
#
#   ${DRAINSCOPE_CACHE:-$HOME/.cache/drainscope}/k8s/<k8s version>/bin/helm
#
# That directory is printed on stdout as the last line. Progress goes to
# stderr. A helm built from the same hack/helm inputs is kept, so a second
# run does nothing; concurrent runs wait for each other. The first build
# takes about two minutes on 2 cores, downloads included.
#
# Usage: scripts/helm-binary.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mod="$root/hack/helm"
k8s=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "$root/hack/k8sbin/go.mod")
helm=$(awk '$1 == "helm.sh/helm/v3" { print $2 }' "$mod/go.mod")
if [[ -z "$k8s" || -z "$helm" ]]; then
	echo "helm-binary: cannot read the pinned versions from hack/k8sbin/go.mod and hack/helm/go.mod" >&2
	exit 1
fi
cache="${DRAINSCOPE_CACHE:-$HOME/.cache/drainscope}"
bin="$cache/k8s/$k8s/bin"
mkdir -p "$bin"

log() { printf 'helm-binary: %s\n' "$*" >&2; }

exec 9>"$bin/.helm.lock"
if ! flock -n 9; then
	log "another build holds $bin/.helm.lock; waiting"
	flock 9
fi

stamp=$(cat "$mod/go.mod" "$mod/go.sum" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)
stamp="$stamp $(go env GOVERSION)"
if [[ -x "$bin/helm" && -f "$bin/.helm.stamp" && "$(cat "$bin/.helm.stamp")" == "$stamp" ]]; then
	log "helm $helm: up to date"
	echo "$bin"
	exit 0
fi

log "helm $helm: building (go build helm.sh/helm/v3/cmd/helm)"
start=$SECONDS
# As helm's Makefile does: the Kubernetes version helm template and helm lint
# assume is that of the client-go it is built with (v0.N.x is 1.N).
cgo=$(awk '$1 == "k8s.io/client-go" { print $2 }' "$mod/go.mod")
kminor=${cgo#v0.}
kminor=${kminor%%.*}
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
	ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$kminor"
done
(cd "$mod" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$bin/.helm.tmp" helm.sh/helm/v3/cmd/helm) || {
	rm -f "$bin/.helm.tmp"
	log "build failed"
	exit 1
}
mv -f "$bin/.helm.tmp" "$bin/helm"
echo "$stamp" >"$bin/.helm.stamp"
log "helm $helm: built in $((SECONDS - start)) s"
echo "$bin"
