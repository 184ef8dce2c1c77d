//go:build linux && amd64 && cgo

package routed

import (
	"bytes"
	"testing"
)

func TestParallelCopy(t *testing.T) {
	for _, n := range []int{0, 1, 1<<20 + 3, 9<<20 + 7} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*7 + i>>13)
		}
		dst := make([]byte, n+5)
		parallelCopy(dst, src)
		if !bytes.Equal(dst[:n], src) || !bytes.Equal(dst[n:], make([]byte, 5)) {
			t.Fatalf("%d bytes: copy differs or wrote past the source's length", n)
		}
	}
}
