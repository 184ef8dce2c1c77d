package cpu

import (
	"fmt"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// BenchmarkStreamRead measures read bandwidth over 1 GiB (MB/s column):
// the bound for bf16 decode, which streams weights once per token.
func BenchmarkStreamRead(b *testing.B) {
	be := New(Options{})
	defer be.Close()
	buf := make([]float32, 1<<28)
	for i := range buf {
		buf[i] = 1
	}
	b.SetBytes(int64(len(buf)) * 4)
	b.ResetTimer()
	for range b.N {
		be.StreamRead(buf)
	}
}

// BenchmarkMatMulBF16 measures the bf16 matmul at decode (n=1) and small
// prefill shapes of Qwen3-30B-A3B (MB/s counts weight bytes read).
func BenchmarkMatMulBF16(b *testing.B) {
	for _, c := range []struct{ n, k, o int }{{1, 2048, 4096}, {1, 2048, 768}, {1, 768, 2048}, {16, 2048, 4096}, {128, 2048, 4096}} {
		// 64 distinct weights in one buffer, so the set (>= 200 MB for the
		// large shape) exceeds the caches; small finite bf16 values.
		size := c.o * c.k * 2
		data := make([]byte, 64*size)
		for i := 0; i < len(data); i += 2 {
			data[i], data[i+1] = byte(i*7), byte(i>>9)&0x80|0x3c
		}
		b.Run(fmt.Sprintf("n%d_k%d_o%d", c.n, c.k, c.o), func(b *testing.B) {
			be := New(Options{})
			defer be.Close()
			ws := make([]*Tensor, 0, 64)
			for i := range 64 {
				w, err := be.Weight(hostOf(tensor.BF16, data[i*size:(i+1)*size], c.o, c.k))
				if err != nil {
					b.Fatal(err)
				}
				ws = append(ws, w.(*Tensor))
			}
			x, _ := be.Alloc(tensor.F32, c.n, c.k)
			out, _ := be.Alloc(tensor.F32, c.n, c.o)
			b.SetBytes(int64(c.o * c.k * 2))
			b.ResetTimer()
			for i := range b.N {
				be.MatMul(out, x, ws[i%len(ws)], c.n)
			}
			if err := be.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(2*c.n*c.k*c.o)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
