//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

var (
	tdOnce sync.Once
	tdDev  *Device
	tdErr  error
)

// testDevice opens GPU 0 once for the package's tests, or skips the test
// with the reason when this machine has no usable GPU (CI has none).
func testDevice(t testing.TB) *Device {
	t.Helper()
	tdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kt-cuda-test-cache")
		if err != nil {
			tdErr = err
			return
		}
		tdDev, tdErr = Open(Options{PoolBytes: 12 << 30, CacheDir: dir})
	})
	if tdErr != nil {
		if errors.Is(tdErr, ErrUnavailable) {
			t.Skipf("no GPU: %v", tdErr)
		}
		t.Fatalf("opening the GPU: %v", tdErr)
	}
	return tdDev
}

func testStream(t testing.TB, d *Device) *Stream {
	t.Helper()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

// upload allocates a buffer holding v.
func upload[T any](t testing.TB, d *Device, v []T) Buffer {
	t.Helper()
	b, err := d.Alloc(int64(len(bytesOf(v)))+16, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	if err := Upload(d, b, v); err != nil {
		t.Fatal(err)
	}
	return b
}

// poisoned allocates n bytes filled with 0xFF (bf16 NaN, int32 -1), so an
// element the kernel failed to write shows up.
func poisoned(t testing.TB, d *Device, n int64) Buffer {
	t.Helper()
	b, err := d.Alloc(n, "test output")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	p := make([]byte, n)
	for i := range p {
		p[i] = 0xff
	}
	if err := Upload(d, b, p); err != nil {
		t.Fatal(err)
	}
	return b
}

func download[T any](t testing.TB, d *Device, s *Stream, b Buffer, n int) []T {
	t.Helper()
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	out := make([]T, n)
	if err := Download(d, out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

func randBF16(rng *rand.Rand, n int, scale float64) []uint16 {
	out := make([]uint16, n)
	for i := range out {
		out[i] = tensor.F32ToBF16(float32(rng.NormFloat64() * scale))
	}
	return out
}

func bf(x uint16) float64 { return float64(tensor.BF16ToF32(x)) }

func bfSlice(x []uint16) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = bf(v)
	}
	return out
}

// relErr returns ‖got − want‖ / ‖want‖; NaN anywhere gives +Inf.
func relErr(got, want []float64) float64 {
	var num, den float64
	for i := range want {
		if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
			return math.Inf(1)
		}
		d := got[i] - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// checkClose fails the test when the relative L2 error exceeds tol.
func checkClose(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	e := relErr(got, want)
	if e > tol {
		worst, wi := 0.0, 0
		for i := range want {
			if d := math.Abs(got[i] - want[i]); d > worst || math.IsNaN(got[i]) {
				worst, wi = d, i
				if math.IsNaN(got[i]) {
					break
				}
			}
		}
		t.Fatalf("%s: relative error %.3g > %.3g (worst at %d: got %g want %g)", name, e, tol, wi, got[wi], want[wi])
	}
	t.Logf("%s: relative error %.3g (tolerance %.3g)", name, e, tol)
}

// benchGeneralVsNew benchmarks run — queued ops, captured as one graph —
// twice, with the general kernels (Backend.generalOnly) and with the fast
// variants, as sub-benchmarks prefix+"/"+general or prefix+"/"+fast: each
// iteration replays the graph and waits for it.
func benchGeneralVsNew(b *testing.B, g *Backend, prefix, general, fast string, run func()) {
	defer func() { g.generalOnly = false }()
	for _, gen := range []bool{true, false} {
		g.generalOnly = gen
		run()
		graph, err := g.Capture(run)
		if err != nil {
			b.Fatal(err)
		}
		name := prefix + "/" + fast
		if gen {
			name = prefix + "/" + general
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				g.Replay(graph)
				if err := g.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
		graph.Destroy()
	}
}

// devTensor allocates a [rows, cols] tensor of dt on g, holding v when v
// is not nil.
func devTensor(tb testing.TB, g *Backend, dt tensor.DType, v []float32, rows, cols int) backend.Tensor {
	tb.Helper()
	x, err := g.Alloc(dt, rows, cols)
	if err != nil {
		tb.Fatal(err)
	}
	if v != nil {
		if err := g.write(x, v); err != nil {
			tb.Fatal(err)
		}
	}
	return x
}

// write copies host values into the first elements of an F32 or I32
// tensor.
func (b *Backend) write(t backend.Tensor, src any) error {
	ct := b.t(t, "write")
	if ct == nil {
		return b.Sync()
	}
	if err := b.s.Synchronize(); err != nil {
		return err
	}
	switch v := src.(type) {
	case []float32:
		if ct.dt != tensor.F32 || len(v) > ct.n {
			return fmt.Errorf("cuda: write: %d floats into %s", len(v), ct.label())
		}
		return Upload(b.d, ct.buf, v)
	case []int32:
		if ct.dt != tensor.I32 || len(v) > ct.n {
			return fmt.Errorf("cuda: write: %d int32s into %s", len(v), ct.label())
		}
		return Upload(b.d, ct.buf, v)
	}
	return fmt.Errorf("cuda: write: unsupported source %T", src)
}
