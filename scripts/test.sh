#!/usr/bin/env bash
# Runs every drainscope test on a fresh machine (as root): installs what is
# missing, starts a throwaway Postgres, checks formatting and vet, and runs
# go test. Extra arguments go to go test (e.g. -run TestX ./store/).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

source scripts/pg-throwaway.sh
trap pg_stop EXIT
pg_start

echo "check: gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '_bpfe[lb]\.go$') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:" >&2
	echo "$unformatted" >&2
	exit 1
fi
echo "check: go vet"
go vet ./...

echo "test: go test"
if [ $# -eq 0 ]; then
	set -- ./...
fi
go test -count=1 -timeout 60m "$@"
