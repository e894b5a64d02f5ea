package main

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeHeap asks the kernel to back the next n bytes of the heap with
// transparent huge pages, for a command that reads, analyses and exits.
// A report's heap is fresh memory it never gives back (see oneShotGC):
// with 4 KiB pages each page is one fault when first touched, and a
// 5,000-node report's 290 MB were 62,000 faults, a quarter of its CPU.
// In 2 MiB pages they are some 150 faults, and the report's user time
// falls by a quarter too: its random reads of the aligner's tables need
// fewer page table walks (docs/scale.md). Most kernels give huge pages
// only where asked (transparent_hugepage "madvise", the default of many
// distributions), and the Go runtime does not ask.
//
// It allocates n bytes, which maps them into the heap without touching
// them; marks the mapping MADV_HUGEPAGE, a mark the mapping keeps; and
// frees the block at once, so that the allocations that follow reuse
// those addresses. Past n, the heap grows in ordinary pages. Nothing
// happens where the kernel has no huge pages (the advice then fails, and
// is ignored), where they are off ("never"), in a 32-bit process, or
// where GODEBUG has disablethp=1, the runtime's own switch for them.
// Call it before the collector is set for the command: it runs one
// collection. Only a process's first call does anything: a later one
// (the tests' reports, in one process) would find the block's addresses
// used and freed, and have the runtime clear all n bytes again.
func hugeHeap(n int64) {
	hugeHeapOnce.Do(func() { adviseHugeHeap(n) })
}

var hugeHeapOnce sync.Once

func adviseHugeHeap(n int64) {
	if n <= 0 || strconv.IntSize < 64 || godebugHas("disablethp=1") {
		return // a 32-bit process has no address space to spare
	}
	b := make([]byte, n)
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	off := int((page - start%page) % page)
	if end := off + (len(b)-off)/int(page)*int(page); end > off {
		_ = unix.Madvise(b[off:end], unix.MADV_HUGEPAGE) // an optimisation: no error matters
	}
	b = nil
	runtime.GC() // frees the block: its pages go back to the heap, still marked
}

// godebugHas reports whether GODEBUG holds setting (name=value), the
// last one for its name winning as in the runtime.
func godebugHas(setting string) bool {
	name, _, _ := strings.Cut(setting, "=")
	found := false
	for kv := range strings.SplitSeq(os.Getenv("GODEBUG"), ",") {
		if n, _, _ := strings.Cut(kv, "="); n == name {
			found = kv == setting
		}
	}
	return found
}
