# Sourced by the scripts that need root (test.sh, lab.sh, bench.sh): as root
# it does nothing; otherwise it runs the script again through sudo, keeping
# PATH so that the same Go toolchain is found, or says how to run it.
if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		echo "$(basename "$0"): needs root; running it again with sudo" >&2
		exec sudo env "PATH=$PATH" "$0" "$@"
	fi
	echo "$(basename "$0"): needs root (for apt-get, eBPF and the lab's network namespaces); run it as root" >&2
	exit 1
fi
