#!/usr/bin/env bash
# Runs drainscope's benchmarks that print side-by-side ratios, against a
# throwaway Postgres (as root on a fresh machine, like scripts/test.sh).
# Extra arguments go to go test, e.g.: scripts/bench.sh -bench Ingest ./store/
set -euo pipefail
source "$(dirname "$0")/as-root.sh"
cd "$(dirname "$0")/.."
scripts/deps.sh
source scripts/pg-throwaway.sh
trap pg_stop EXIT
pg_start
if [ $# -eq 0 ]; then
	set -- -bench . ./...
fi
go test -count=1 -run '^$' -benchtime=1x -timeout 60m "$@"
