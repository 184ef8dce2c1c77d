//go:build cgo

package cuda

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestPoolSize(t *testing.T) {
	const gib = int64(1) << 30
	tests := []struct {
		name        string
		total, free int64
		frac        float64
		want        int64
		wantErr     string
	}{
		{"fraction of total", 80 * gib, 79 * gib, 0.5, 40 * gib, ""},
		{"capped by free", 80 * gib, 30 * gib, 0.9, 30*gib - poolReserve, ""},
		{"zero", 80 * gib, 80 * gib, 0, 0, "out of range"},
		{"above one", 80 * gib, 80 * gib, 1.5, 0, "out of range"},
		{"NaN", 80 * gib, 80 * gib, nan(), 0, "out of range"},
		{"nothing free", 80 * gib, 100 << 20, 0.9, 0, "too small"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PoolSize(tc.total, tc.free, tc.frac)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--mem-fraction-static") {
					t.Fatalf("PoolSize err = %v, want one containing %q naming the flag", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want&^(PoolAlign-1) {
				t.Fatalf("PoolSize = %d, want %d", got, tc.want)
			}
		})
	}
}

func nan() float64 { var z float64; return z / z }

// TestArenaRandom allocates and frees at random and checks the invariants:
// no two live ranges overlap, alignment holds, and freeing everything
// coalesces back into one span.
func TestArenaRandom(t *testing.T) {
	const size = 1 << 20
	a := newArena(size)
	rng := rand.New(rand.NewPCG(1, 2))
	type alloc struct{ off, n int64 }
	var live []alloc
	for i := 0; i < 5000; i++ {
		if len(live) > 0 && rng.IntN(3) == 0 {
			j := rng.IntN(len(live))
			a.release(live[j].off, live[j].n)
			live = append(live[:j], live[j+1:]...)
			continue
		}
		n := int64(rng.IntN(20000))
		off, ok := a.alloc(n)
		if !ok {
			if a.largest() >= alignUp(max(n, 1), PoolAlign) {
				t.Fatalf("alloc(%d) failed with a free span of %d", n, a.largest())
			}
			continue
		}
		if off%PoolAlign != 0 || off+n > size {
			t.Fatalf("alloc(%d) = %d: misaligned or out of range", n, off)
		}
		for _, l := range live {
			if off < l.off+alignUp(max(l.n, 1), PoolAlign) && l.off < off+alignUp(max(n, 1), PoolAlign) {
				t.Fatalf("alloc(%d) = %d overlaps live [%d,+%d)", n, off, l.off, l.n)
			}
		}
		live = append(live, alloc{off, n})
	}
	for _, l := range live {
		a.release(l.off, l.n)
	}
	if len(a.free) != 1 || a.free[0] != (span{0, size}) || a.used != 0 {
		t.Fatalf("after freeing everything: free=%v used=%d", a.free, a.used)
	}
}

func TestArenaDoubleFreePanics(t *testing.T) {
	a := newArena(1 << 16)
	off, _ := a.alloc(1000)
	a.release(off, 1000)
	defer func() {
		if recover() == nil {
			t.Fatal("double free did not panic")
		}
	}()
	a.release(off, 1000)
}
