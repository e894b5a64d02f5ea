package ebpf

// The BPF programs in bpf/drainscope.c are compiled to probes_bpfel.o and
// wrapped in probes_bpfel.go by bpf2go (pinned as a tool in go.mod). Both
// outputs are committed so that building drainscope needs no clang;
// check-generated.sh fails when they are stale.
//
// bpf/vmlinux.h comes from the kernel's BTF:
//
//	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h
//
// Thanks to CO-RE relocations the objects load on other kernels with BTF.

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type event -type kind -type flag -no-global-types probes bpf/drainscope.c -- -I./bpf
