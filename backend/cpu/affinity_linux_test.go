//go:build linux

package cpu

import (
	"slices"
	"testing"
)

// TestPinnedWorkers pins a backend's workers (Options.CPUs) and checks
// that each worker other than the caller runs on a thread bound to one of
// them, and that a CPU outside the range is reported (PinErr), the backend
// working unpinned.
func TestPinnedWorkers(t *testing.T) {
	allowed := AllowedCPUs()
	if len(allowed) == 0 {
		t.Skip("the affinity mask cannot be read")
	}
	cpus := []int{allowed[len(allowed)-1], allowed[0]}
	b := New(Options{Threads: 3, CPUs: cpus})
	defer b.Close()
	if err := b.PinErr(); err != nil {
		t.Fatal(err)
	}
	// the ranges other than the first run on the pool's goroutines (any
	// of them): each on a thread bound to one CPU of cpus
	seen := make([][]int, 3)
	b.pool.run(3, 1, func(worker, lo, hi int) { seen[worker] = AllowedCPUs() })
	for w := 1; w < 3; w++ {
		if len(seen[w]) != 1 || !slices.Contains(cpus, seen[w][0]) {
			t.Errorf("worker %d runs on CPUs %v, want one of %v", w, seen[w], cpus)
		}
	}
	bad := New(Options{Threads: 2, CPUs: []int{1 << 20}})
	defer bad.Close()
	if bad.PinErr() == nil {
		t.Error("a CPU out of range: no PinErr")
	}
}
