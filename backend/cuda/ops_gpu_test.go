//go:build cgo

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/tensor"
)

// Each GPU op is checked against a float64 reference on random inputs at
// real model shapes (Qwen3-30B-A3B, Qwen3-Next-80B-A3B, Qwen3.5-35B-A3B).
// Tolerances are relative L2 errors ‖gpu − ref‖/‖ref‖: bf16 outputs round
// at 2⁻⁹, so 1e-2 allows a few rounding flips; float32 outputs 1e-4.

func TestGemm(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(1, 1))
	for _, tc := range []struct {
		m, n, k int
		out     tensor.DType
		acc     bool
	}{
		{1, 2048, 2048, tensor.BF16, false},  // decode projection
		{37, 1536, 2048, tensor.BF16, false}, // odd token count, expert gate/up
		{64, 4096, 2048, tensor.F32, false},  // float32 logits
		{16, 2048, 768, tensor.BF16, true},   // accumulate into D
	} {
		t.Run(fmt.Sprintf("M%d_N%d_K%d_%v_acc%v", tc.m, tc.n, tc.k, tc.out, tc.acc), func(t *testing.T) {
			a := randBF16(rng, tc.m*tc.k, 1)
			b := randBF16(rng, tc.n*tc.k, 0.05)
			ref := make([]float64, tc.m*tc.n)
			var d0 []uint16
			if tc.acc {
				d0 = randBF16(rng, tc.m*tc.n, 1)
			}
			for i := 0; i < tc.m; i++ {
				for j := 0; j < tc.n; j++ {
					var sum float64
					for k := 0; k < tc.k; k++ {
						sum += bf(a[i*tc.k+k]) * bf(b[j*tc.k+k])
					}
					if tc.acc {
						sum += bf(d0[i*tc.n+j])
					}
					ref[i*tc.n+j] = sum
				}
			}
			var db Buffer
			if tc.acc {
				db = upload(t, d, d0)
			} else {
				db = poisoned(t, d, int64(tc.m*tc.n*tc.out.Size()))
			}
			err := d.Gemm(s, GemmArgs{M: tc.m, N: tc.n, K: tc.k, A: upload(t, d, a), B: upload(t, d, b), D: db,
				AType: tensor.BF16, BType: tensor.BF16, DType: tc.out, Accumulate: tc.acc})
			if err != nil {
				t.Fatal(err)
			}
			var got []float64
			tol := 1e-2
			if tc.out == tensor.F32 {
				g := download[float32](t, d, s, db, tc.m*tc.n)
				got = make([]float64, len(g))
				for i, v := range g {
					got[i] = float64(v)
				}
				tol = 1e-4
			} else {
				got = bfSlice(download[uint16](t, d, s, db, tc.m*tc.n))
			}
			checkClose(t, "gemm", got, ref, tol)
		})
	}
}

func f64s(x []float32) []float64 {
	o := make([]float64, len(x))
	for i, v := range x {
		o[i] = float64(v)
	}
	return o
}

// refPick is the pick model.Draw describes, in float64 over the row's
// tempered probabilities as the host sampler rounds them (float32 product
// and difference), with margin: how close the draw, or a top-p cut, fell
// to a boundary, relative to the mass (0: the token is ambiguous under
// rounding).
func refPick(row []float32, d model.Draw) (tok int, margin float64) {
	inv := float32(1 / d.Temperature)
	mx := float32(math.Inf(-1))
	for _, v := range row {
		mx = max(mx, v*inv)
	}
	p := make([]float64, len(row))
	order := make([]int, 0, len(row))
	for i, v := range row {
		if p[i] = math.Exp(float64(v*inv - mx)); p[i] > 0 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return p[order[a]] > p[order[b]] })
	L := len(order)
	margin = 1
	if d.TopK > 0 && d.TopK < L {
		L = d.TopK
		if float32(p[order[L-1]]) == float32(p[order[L]]) && p[order[L-1]] != p[order[L]] {
			margin = 0 // a float32 tie the float64 values split
		}
	}
	if d.TopP > 0 && d.TopP < 1 {
		var tot, cum float64
		for _, i := range order[:L] {
			tot += p[i]
		}
		target := d.TopP * tot
		for n, i := range order[:L] {
			cum += p[i]
			if cum >= target {
				if math.Abs(cum-target) < 1e-6*tot || math.Abs(cum-p[i]-target) < 1e-6*tot {
					margin = 0
				}
				L = n + 1
				break
			}
		}
	}
	if d.MinP > 0 {
		th := float32(d.MinP)
		n := 0
		for n < L && float32(p[order[n]]) >= th {
			n++
		}
		L = n
	}
	set := slices.Clone(order[:L])
	slices.Sort(set)
	var mass float64
	for _, i := range set {
		mass += p[i]
	}
	r := d.U * mass
	var acc float64
	tok = -1
	for _, i := range set {
		margin = min(margin, math.Abs(acc-r)/mass)
		acc += p[i]
		if acc > r && tok < 0 {
			tok = i
		}
	}
	return tok, margin
}

// TestPick: m_pick against the host sampler (sample.Sampler.SampleAt) and
// a float64 reference on rows of several shapes (spread, peaked, flat,
// with many exact ties) under every filter and their combinations. A
// token may differ only where rounding puts the draw, or a top-p cut,
// within 1e-5 of the mass of a boundary.
func TestPick(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(10, 1))
	const V = 151936
	draws := []model.Draw{
		{}, // greedy
		{Temperature: 1},
		{Temperature: 0.7, TopK: 20},
		{Temperature: 1, TopP: 0.9},
		{Temperature: 0.6, TopK: 40, TopP: 0.95, MinP: 0.05},
		{Temperature: 1.3, MinP: 0.1},
		{Temperature: 1, TopK: 1000, TopP: 0.5},
		{Temperature: 0.8, TopP: 0.3},
		{Temperature: 1, TopK: V - 1},
		{Temperature: 2, TopP: 0.99, MinP: 0.001},
		{Temperature: 0.5, TopK: 1},
		{Temperature: 0.7, TopK: 20, TopP: 0.8},
		{Temperature: 1.1, TopK: 1024, TopP: 0.97, MinP: 0.01},
	}
	kinds := []string{"spread", "peaked", "flat", "ties"}
	B := len(draws) * len(kinds) * 3
	logits := make([]float32, B*V)
	rowDraw := make([]model.Draw, B)
	params := make([]PickParams, B)
	for b := range B {
		row := logits[b*V : (b+1)*V]
		kind := kinds[(b/len(draws))%len(kinds)]
		for i := range row {
			switch kind {
			case "spread":
				row[i] = float32(rng.NormFloat64() * 3)
			case "peaked":
				row[i] = float32(rng.NormFloat64())
			case "flat":
				row[i] = float32(rng.NormFloat64() * 0.3)
			case "ties":
				row[i] = float32(math.Round(rng.NormFloat64()*4)) / 2
			}
		}
		if kind == "peaked" {
			row[rng.IntN(V)] = 12
		}
		dr := draws[b%len(draws)]
		dr.U = rng.Float64()
		rowDraw[b], params[b] = dr, pickParams(dr)
	}
	lb, pb := upload(t, d, logits), upload(t, d, params)
	out := poisoned(t, d, int64(B*8))
	var sm sample.Sampler
	check := func(kernel string, got []float32) {
		t.Helper()
		exact := 0
		for b := range B {
			row, dr := logits[b*V:(b+1)*V], rowDraw[b]
			g := int(got[2*b])
			host, _, err := sm.Pick(row, dr)
			if err != nil {
				t.Fatal(err)
			}
			ref, margin := int(host), 1.0
			if !dr.Greedy() {
				ref, margin = refPick(row, dr)
			}
			if g == int(host) {
				exact++
			}
			if (g != int(host) || g != ref) && margin > 1e-5 {
				t.Errorf("%s row %d (%s, %+v): picked %d, host sampler %d, reference %d (margin %.3g)", kernel, b, kinds[(b/len(draws))%len(kinds)], dr, g, host, ref, margin)
			}
			if g < 0 || g >= V {
				continue
			}
			want := sample.LogSoftmax(row, nil)[g]
			if math.Abs(float64(got[2*b+1])-want) > 1e-5*max(1, math.Abs(want)) {
				t.Errorf("%s row %d: logprob %g, want %g", kernel, b, got[2*b+1], want)
			}
		}
		t.Logf("%s: %d of %d picks identical to the host sampler's", kernel, exact, B)
		if exact < B*95/100 {
			t.Errorf("%s: only %d of %d picks identical to the host sampler's", kernel, exact, B)
		}
	}
	// all rows at once: m_pick_rows, one block per row
	if err := d.launchPick(s, B, out, lb, V, pb); err != nil {
		t.Fatal(err)
	}
	check("m_pick_rows", download[float32](t, d, s, out, 2*B))
	// pickClusterRows rows at a time: m_pick, a cluster per row on sm_90
	out = poisoned(t, d, int64(B*8))
	for b0 := 0; b0 < B; b0 += pickClusterRows {
		n := min(pickClusterRows, B-b0)
		if err := d.launchPick(s, n, out.Slice(int64(b0*8), int64(n*8)), lb.Slice(int64(b0*V*4), int64(n*V*4)), V, pb.Slice(int64(b0*32), int64(n*32))); err != nil {
			t.Fatal(err)
		}
	}
	check("m_pick", download[float32](t, d, s, out, 2*B))
	// no params: every row greedy
	if err := d.launchPick(s, B, out, lb, V, Buffer{}); err != nil {
		t.Fatal(err)
	}
	got := download[float32](t, d, s, out, 2*B)
	for b := range B {
		row := logits[b*V : (b+1)*V]
		am := 0
		for i, v := range row {
			if v > row[am] {
				am = i
			}
		}
		if int(got[2*b]) != am {
			t.Fatalf("row %d greedy: picked %v, want %d", b, got[2*b], am)
		}
	}
}

// TestRouteLogits checks Device.RouteLogits against a float64 reference
// (Σ_h w·g·x, no 1/rms) on real router shapes, into device memory and into
// pinned host memory through its device address, for one and three rows.
// Bad sizes are refused.
func TestRouteLogits(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(9, 1))
	for _, c := range []struct{ n, E, H int }{{1, 256, 2048}, {3, 128, 2048}, {1, 60, 1408}, {2, 5, 1001}} { // 1001: the scalar loop
		x := make([]float32, c.n*c.H)
		g := make([]float32, c.H)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		for i := range g {
			g[i] = float32(1 + 0.3*rng.NormFloat64())
		}
		w := randBF16(rng, c.E*c.H, 0.05)
		xb, gb, wb := upload(t, d, x), upload(t, d, g), upload(t, d, w)
		want := make([]float64, c.n*c.E)
		for r := 0; r < c.n; r++ {
			for e := 0; e < c.E; e++ {
				for h := 0; h < c.H; h++ {
					want[r*c.E+e] += bf(w[e*c.H+h]) * float64(g[h]) * float64(x[r*c.H+h])
				}
			}
		}
		host, err := d.AllocHost(int64(c.n * c.E * 4))
		if err != nil {
			t.Fatal(err)
		}
		hp, err := host.DevicePtr()
		if err != nil {
			t.Fatal(err)
		}
		dev := poisoned(t, d, int64(c.n*c.E*4))
		for _, out := range []uint64{dev.Ptr, hp} {
			if err := d.RouteLogits(s, out, xb, gb, wb, c.n, c.E, c.H); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for i, got := range [][]float32{download[float32](t, d, s, dev, c.n*c.E), HostSlice[float32](host)} {
			for j, v := range got {
				if math.Abs(float64(v)-want[j]) > 1e-4*(1+math.Abs(want[j])) {
					t.Fatalf("%v, out %d: logit %d = %g, want %g", c, i, j, v, want[j])
				}
			}
		}
		_ = host.Free()
	}
	if err := d.RouteLogits(s, 1, Buffer{}, Buffer{}, Buffer{}, 1, 8, 64); err == nil {
		t.Error("RouteLogits over empty buffers was queued")
	}
}
