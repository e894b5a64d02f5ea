#!/usr/bin/env bash
# Builds the kubectl plugin's release archives for krew and its manifest:
# kubectl-drainscope (cmd/kubectl-drainscope) for linux and darwin, amd64
# and arm64, each in kubectl-drainscope_VERSION_OS_ARCH.tar.gz, and
# deploy/plugin.yaml with the version, the download address and each
# archive's sha256 filled in, all into OUTDIR (default dist/krew):
#
#   scripts/krew-release.sh v0.1.0
#   kubectl krew install --manifest=dist/krew/plugin.yaml \
#       --archive=dist/krew/kubectl-drainscope_v0.1.0_linux_amd64.tar.gz   # try it
#
# Upload the archives to the release (URL, default the GitHub release of
# VERSION) before submitting plugin.yaml to krew-index. The archives are
# reproducible (-trimpath, no build id, fixed times and owners in the tar),
# so building the same commit again gives the same sha256.
#
# PLATFORMS (default "linux/amd64 linux/arm64 darwin/amd64 darwin/arm64")
# builds fewer, and the manifest lists only those: the tests build this
# machine's alone.
#
# Usage: [PLATFORMS=…] scripts/krew-release.sh VERSION [OUTDIR] [URL]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${1:-}
out=${2:-$root/dist/krew}
url=${3:-https://github.com/drainscope/drainscope/releases/download/$version}
if [[ ! "$version" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "usage: scripts/krew-release.sh VERSION [OUTDIR] [URL]: VERSION is krew's semantic version with a v, e.g. v0.1.0 (got \"$version\")" >&2
	exit 2
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

platforms=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
# Each platform's entry runs from its "- selector:" line to the next; keep
# those of the platforms built.
manifest=$(awk -v keep="$platforms" '
	function flush() { if (entry != "" && index(" " keep " ", " " os "/" arch " ")) printf "%s", entry; entry = "" }
	/^    - selector:/ { flush(); inentry = 1 }
	inentry { entry = entry $0 "\n"; if ($1 == "os:") os = $2; if ($1 == "arch:") arch = $2; next }
	{ print }
	END { flush() }' "$root/deploy/plugin.yaml" | sed -e '/^#/d' -e "s|@VERSION@|$version|g" -e "s|@URL@|$url|g")
for platform in $platforms; do
	os=${platform%/*} arch=${platform#*/}
	dir="$work/${os}_$arch"
	mkdir -p "$dir"
	(cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=false \
		-ldflags "-s -w -buildid=" -o "$dir/kubectl-drainscope" ./cmd/kubectl-drainscope)
	cp "$root/LICENSE" "$dir/LICENSE"
	archive="kubectl-drainscope_${version}_${os}_$arch.tar.gz"
	tar -C "$dir" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - LICENSE kubectl-drainscope | gzip -n >"$out/$archive"
	sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
	manifest=${manifest//@SHA256_${os}_$arch@/$sum}
	printf '%s  %s\n' "$sum" "$archive"
done
if grep -q '@[A-Za-z0-9_]*@' <<<"$manifest"; then
	echo "krew-release: deploy/plugin.yaml has a field this script does not fill: $(grep -o '@[A-Za-z0-9_]*@' <<<"$manifest" | sort -u | tr '\n' ' ')" >&2
	exit 1
fi
printf '%s\n' "$manifest" >"$out/plugin.yaml"
echo "krew-release: $out/plugin.yaml" >&2
