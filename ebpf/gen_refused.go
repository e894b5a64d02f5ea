package ebpf

// bpf/refused.c (the refused-connection fallback for kernels before 6.10,
// see refused.go) is compiled on its own into refused_bpfel.{go,o}, beside
// probes_bpfel.{go,o}; check-generated.sh checks both.

//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type event -no-global-types refused bpf/refused.c -- -I./bpf
