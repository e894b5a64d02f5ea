#!/bin/sh
# Fails when the committed bpf2go outputs (probes_bpfel.{go,o} from
# bpf/drainscope.c, refused_bpfel.{go,o} from bpf/refused.c) are not what
# the C sources compile to: it runs each go:generate line of gen*.go into a
# temporary directory and compares. Needs clang, llvm-strip and libbpf
# headers (Debian: clang llvm libbpf-dev).
#
#   ebpf/check-generated.sh         check
#   go generate ./ebpf              regenerate after changing the C code
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

lines=$(sed -n 's|^//go:generate go tool bpf2go ||p' gen*.go)
[ -n "$lines" ] || { echo "check-generated: no bpf2go line in gen*.go" >&2; exit 1; }
stale=0
echo "$lines" | {
	while IFS= read -r line; do
		stem=${line##*-no-global-types }
		stem=${stem%% *}
		eval "GOPACKAGE=ebpf go tool bpf2go -output-dir \"\$tmp\" $line" >/dev/null
		for f in "${stem}_bpfel.go" "${stem}_bpfel.o"; do
			if ! cmp -s "$f" "$tmp/$f"; then
				echo "check-generated: ebpf/$f is stale; run: go generate ./ebpf" >&2
				stale=1
			fi
		done
		[ "$stale" = 0 ] && echo "check-generated: ebpf/${stem}_bpfel.{go,o} are up to date"
	done
	exit "$stale"
}
