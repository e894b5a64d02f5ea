#!/usr/bin/env bash
# The main job: run drainscope's local lab on this machine (as root). It
# installs what is missing, builds the Kubernetes binaries once (cached),
# builds drainscope, and runs `drainscope lab` on the embedded store.
# Extra arguments go to `drainscope lab` (see `drainscope lab -h`).
set -euo pipefail
source "$(dirname "$0")/as-root.sh"
cd "$(dirname "$0")/.."
scripts/deps.sh
if [ -x scripts/k8s-binaries.sh ]; then
	scripts/k8s-binaries.sh
fi
mkdir -p bin
# Static (no C library), as deploy/Dockerfile builds it: --node kubelet
# puts this binary into the real node's images, which hold nothing else.
# The SQLite store is pure Go (modernc.org/sqlite), so nothing is lost.
CGO_ENABLED=0 go build -o bin/drainscope ./cmd/drainscope
exec bin/drainscope lab "$@"
