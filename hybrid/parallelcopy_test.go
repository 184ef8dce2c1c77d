//go:build linux && amd64 && cgo

package hybrid

import (
	"bytes"
	"fmt"
	"testing"
)

// TestParallelCopy checks the staging copy on groups of parts like an
// upload's (gate, up, down and scales of several experts back to back, at
// offsets with gaps): every byte lands at its part's offset whatever the
// split into goroutine ranges (1 to 8 of them), and nothing outside the parts is written.
func TestParallelCopy(t *testing.T) {
	for _, sizes := range [][]int{
		nil,
		{0},
		{1},
		{1<<20 + 3},
		{9<<20 + 7},
		{2 << 20, 2 << 20, 2 << 20}, // one Qwen3.5-width expert
		{3<<20 + 1, 17, 0, 5 << 20, 1<<20 - 1, 4096, 9}, // pieces cut inside parts
		{100, 200, 300}, // below one piece: one thread
	} {
		t.Run(fmt.Sprint(sizes), func(t *testing.T) {
			var parts []copyPart
			var off int64
			for i, n := range sizes {
				src := make([]byte, n)
				for j := range src {
					src[j] = byte(j*7 + j>>13 + i*31 + 1)
				}
				off += int64(i % 3) // gaps between some parts stay untouched
				parts = append(parts, copyPart{off: off, src: src})
				off += int64(n)
			}
			want := make([]byte, off+5)
			for _, p := range parts {
				copy(want[p.off:], p.src)
			}
			for _, workers := range []int{1, 2, 3, 8} {
				dst := make([]byte, len(want))
				parallelCopyOn(dst, parts, workers)
				if !bytes.Equal(dst, want) {
					t.Fatalf("%d workers: the copy differs from the parts at their offsets", workers)
				}
			}
		})
	}
}
