//go:build cgo

package cuda

import (
	"os"
	"sync"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
	"github.com/ktserve/kt/tp"
)

// TestNCCLCollectives makes an NCCL group over every GPU (up to 8; one
// GPU is a group of one) and checks AllReduce, Broadcast and AllGatherCols
// (the last rank's narrower) against the sums and copies computed on the host, each
// rank on its own goroutine. It skips without a GPU or libnccl.so.2.
func TestNCCLCollectives(t *testing.T) {
	testDevice(t) // skips without a GPU
	if e := LoadLibraries().Err["nccl"]; e != nil {
		t.Skipf("no NCCL: %v", e)
	}
	n, err := DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	n = min(n, 8)
	dir := t.TempDir()
	bes := make([]*Backend, n)
	for r := range n {
		d, err := Open(Options{Ordinal: r, PoolBytes: 1 << 30, CacheDir: dir})
		if err != nil {
			t.Fatalf("GPU %d: %v", r, err)
		}
		b, err := NewBackendOn(d)
		if err != nil {
			t.Fatal(err)
		}
		b.ownDev = true
		bes[r] = b
		t.Cleanup(func() { b.Close() })
	}
	g, err := NewNCCLGroup(bes)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := os.Getenv("NCCL_NVLS_ENABLE"); got == "" {
		t.Error("NCCL_NVLS_ENABLE not set")
	}
	const rows, cols = 3, 5
	W := 8*n - 1 // the gather: 8 columns a rank, the last 7
	widths := tp.GatherWidths(W, n)
	val := func(r, i int) float32 { return float32(100*r + i) }
	xs, bs, gs, outs := make([]backend.Tensor, n), make([]backend.Tensor, n), make([]backend.Tensor, n), make([]backend.Tensor, n)
	up := func(b *Backend, v []float32, shape ...int) backend.Tensor {
		x, err := b.Alloc(tensor.F32, shape...)
		if err != nil {
			t.Fatal(err)
		}
		if err := Upload(b.d, x.(*Tensor).buf, v); err != nil {
			t.Fatal(err)
		}
		return x
	}
	for r, b := range bes {
		v := make([]float32, (rows+1)*cols)
		for i := range v {
			v[i] = val(r, i)
		}
		xs[r], bs[r] = up(b, v, rows+1, cols), up(b, v, rows+1, cols)
		gv := make([]float32, (rows+1)*max(widths[r], 1))
		for i := range gv {
			gv[i] = val(r, i)
		}
		gs[r] = up(b, gv, rows+1, widths[r])
		outs[r] = up(b, make([]float32, (rows+1)*W), rows+1, W)
	}
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.Comm(r)
			c.AllReduce(xs[r], rows)
			c.Broadcast(bs[r], rows)
			c.AllGatherCols(outs[r], gs[r], rows)
		}()
	}
	wg.Wait()
	for r, b := range bes {
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := g.Comm(r).Err(); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		x, bb, o := make([]float32, (rows+1)*cols), make([]float32, (rows+1)*cols), make([]float32, (rows+1)*W)
		for _, p := range []struct {
			dst []float32
			t   backend.Tensor
		}{{x, xs[r]}, {bb, bs[r]}, {o, outs[r]}} {
			if err := b.Read(p.dst, p.t, rows+1); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < rows*cols; i++ {
			var sum float32
			for q := range n {
				sum += val(q, i)
			}
			if x[i] != sum || bb[i] != val(0, i) {
				t.Fatalf("rank %d element %d: AllReduce %v (want %v), Broadcast %v (want %v)", r, i, x[i], sum, bb[i], val(0, i))
			}
		}
		for i := rows * cols; i < len(x); i++ {
			if x[i] != val(r, i) {
				t.Fatalf("rank %d: AllReduce wrote past %d rows", r, rows)
			}
		}
		for i := range rows {
			off := 0
			for q, w := range widths {
				for j := range w {
					if got, want := o[i*W+off+j], val(q, i*w+j); got != want {
						t.Fatalf("rank %d: AllGatherCols row %d rank %d col %d = %v, want %v", r, i, q, j, got, want)
					}
				}
				off += w
			}
		}
	}
	t.Logf("%d GPU(s): AllReduce, Broadcast, AllGatherCols over NCCL", n)
}
