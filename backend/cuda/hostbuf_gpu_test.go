//go:build cgo

package cuda

import (
	"fmt"
	"testing"
	"unsafe"
)

// BenchmarkHostBufferRead reads pinned host memory (AllocHost, the hybrid
// step's staging buffers) and ordinary Go memory of the same sizes from the
// CPU: on a machine where pinned memory is mapped uncached or
// write-combined, the CPU experts' reads of a layer's activations would pay
// for it on every hand-off. Needs a GPU:
//
//	cuda.test -test.run XXX -test.bench HostBufferRead
func BenchmarkHostBufferRead(b *testing.B) {
	d := testDevice(b)
	for _, n := range []int{8 << 10, 1 << 20} {
		h, err := d.AllocHost(int64(n))
		if err != nil {
			b.Fatal(err)
		}
		pinned := h.Bytes()
		plain := make([]byte, n)
		for _, c := range []struct {
			name string
			buf  []byte
		}{{"pinned", pinned}, {"go", plain}} {
			buf := c.buf
			b.Run(fmt.Sprintf("%s/%dKiB", c.name, n>>10), func(b *testing.B) {
				words := unsafe.Slice((*uint64)(unsafe.Pointer(&buf[0])), n/8)
				for i := range words {
					words[i] = uint64(i)
				}
				var sum uint64
				b.SetBytes(int64(n))
				for range b.N {
					for _, w := range words {
						sum += w
					}
				}
				if sum == 1 {
					b.Log(sum)
				}
			})
		}
		h.Free()
	}
}
