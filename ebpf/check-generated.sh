#!/bin/sh
# Fails when the committed bpf2go outputs (probes_bpfel.go, probes_bpfel.o)
# are not what bpf/drainscope.c compiles to: it runs gen.go's go:generate
# line into a temporary directory and compares. Needs clang, llvm-strip and
# libbpf headers (Debian: clang llvm libbpf-dev).
#
#   ebpf/check-generated.sh         check
#   go generate ./ebpf              regenerate after changing the C code
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

line=$(sed -n 's|^//go:generate go tool bpf2go ||p' gen.go)
[ -n "$line" ] || { echo "check-generated: no bpf2go line in gen.go" >&2; exit 1; }
eval "GOPACKAGE=ebpf go tool bpf2go -output-dir \"\$tmp\" $line" >/dev/null

stale=0
for f in probes_bpfel.go probes_bpfel.o; do
	if ! cmp -s "$f" "$tmp/$f"; then
		echo "check-generated: ebpf/$f is stale; run: go generate ./ebpf" >&2
		stale=1
	fi
done
[ "$stale" = 0 ] && echo "check-generated: ebpf/probes_bpfel.{go,o} are up to date"
exit "$stale"
