#!/usr/bin/env bash
# Installs what drainscope's tests and lab need on a fresh Debian machine:
# Debian packages (only those missing) and the Go modules. Needs root for
# apt-get; safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
	postgresql        # the Postgres store's tests and benchmark
	clang llvm        # compiling the eBPF programs (go generate ./ebpf)
	libbpf-dev bpftool
	iproute2 nftables # the lab's network namespaces and kube-proxy's rules
	iptables          # kube-proxy's iptables mode: iptables-nft and iptables-legacy
	nginx             # real nginx access logs for the importer's tests
	haproxy           # the ingress proxy driven through its runtime API (lab/ingress)
	chromium          # the web UI's browser test
	python3           # the lab's end-to-end test loads it with an independent client (http.client)
	containerd runc containernetworking-plugins # the lab's real node (drainscope lab --node kubelet)
	busybox-static    # the real node's log-shipper image (drainscope lab --profile longlived)
)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing Debian packages: ${missing[*]} (run as root to install them)" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >/dev/null
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "deps: Go modules"
go mod download
