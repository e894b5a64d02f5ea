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
go build -o bin/drainscope ./cmd/drainscope
exec bin/drainscope lab "$@"
