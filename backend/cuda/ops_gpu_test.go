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

func TestRMSNorm(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(2, 1))
	const eps = 1e-6
	rms := func(x []float64) float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		return 1 / math.Sqrt(ss/float64(len(x))+eps)
	}
	for _, mode := range []NormMode{NormPlain, NormOnePlusW} {
		for _, tc := range []struct{ rows, dim int }{{7, 2048}, {64, 128}, {3, 256}} {
			t.Run(fmt.Sprintf("mode%d_%dx%d", mode, tc.rows, tc.dim), func(t *testing.T) {
				x := randBF16(rng, tc.rows*tc.dim, 3)
				w := randBF16(rng, tc.dim, 0.5)
				out := poisoned(t, d, int64(tc.rows*tc.dim*2))
				if err := d.RMSNorm(s, out, upload(t, d, x), upload(t, d, w), tc.rows, tc.dim, int64(tc.dim), int64(tc.dim), eps, mode); err != nil {
					t.Fatal(err)
				}
				ref := make([]float64, len(x))
				for r := 0; r < tc.rows; r++ {
					xr := bfSlice(x[r*tc.dim : (r+1)*tc.dim])
					rr := rms(xr)
					for i, v := range xr {
						if mode == NormPlain {
							ref[r*tc.dim+i] = rb(bf(w[i]) * rb(v*rr))
						} else {
							ref[r*tc.dim+i] = rb(v * rr * (1 + bf(w[i])))
						}
					}
				}
				checkClose(t, "rmsnorm", bfSlice(download[uint16](t, d, s, out, len(x))), ref, 1e-2)
			})
		}
	}
	t.Run("add", func(t *testing.T) {
		const rows, dim = 5, 2048
		res := randBF16(rng, rows*dim, 1)
		x := randBF16(rng, rows*dim, 1)
		w := randBF16(rng, dim, 0.5)
		rbuf := upload(t, d, res)
		out := poisoned(t, d, rows*dim*2)
		if err := d.AddRMSNorm(s, out, rbuf, upload(t, d, x), upload(t, d, w), rows, dim, eps, NormOnePlusW); err != nil {
			t.Fatal(err)
		}
		refR := make([]float64, rows*dim)
		ref := make([]float64, rows*dim)
		for r := 0; r < rows; r++ {
			for i := 0; i < dim; i++ {
				refR[r*dim+i] = rb(bf(res[r*dim+i]) + bf(x[r*dim+i]))
			}
			rr := rms(refR[r*dim : (r+1)*dim])
			for i := 0; i < dim; i++ {
				ref[r*dim+i] = rb(refR[r*dim+i] * rr * (1 + bf(w[i])))
			}
		}
		checkClose(t, "residual", bfSlice(download[uint16](t, d, s, rbuf, rows*dim)), refR, 1e-3)
		checkClose(t, "norm", bfSlice(download[uint16](t, d, s, out, rows*dim)), ref, 1e-2)
	})
	t.Run("gated", func(t *testing.T) {
		const rows, dim = 32 * 3, 128 // 32 value heads × 3 tokens
		x := randBF16(rng, rows*dim, 1)
		z := randBF16(rng, rows*dim, 1)
		w := randBF16(rng, dim, 1)
		out := poisoned(t, d, rows*dim*2)
		if err := d.RMSNormGated(s, out, upload(t, d, x), upload(t, d, z), upload(t, d, w), rows, dim, dim, dim, dim, eps); err != nil {
			t.Fatal(err)
		}
		ref := make([]float64, rows*dim)
		for r := 0; r < rows; r++ {
			rr := rms(bfSlice(x[r*dim : (r+1)*dim]))
			for i := 0; i < dim; i++ {
				zz := bf(z[r*dim+i])
				ref[r*dim+i] = rb(rb(bf(w[i])*rb(bf(x[r*dim+i])*rr)) * zz / (1 + math.Exp(-zz)))
			}
		}
		checkClose(t, "gated", bfSlice(download[uint16](t, d, s, out, rows*dim)), ref, 1e-2)
	})
}

func TestRope(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(3, 1))
	for _, tc := range []struct {
		name              string
		T, heads, hd, rot int
		theta             float64
		mode              RopeMode
		sections          [3]int
	}{
		{"neox_qwen3", 9, 32, 128, 128, 1e6, RopeNeox, [3]int{}},
		{"partial_qwen3next", 5, 16, 256, 64, 1e7, RopeNeox, [3]int{}},
		{"mrope_qwen35", 6, 16, 256, 64, 1e7, RopeMRoPEInterleaved, [3]int{11, 11, 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.T * tc.heads * tc.hd
			x := randBF16(rng, n, 1)
			np := tc.T
			if tc.mode == RopeMRoPEInterleaved {
				np *= 3
			}
			pos := make([]int32, np)
			for i := range pos {
				pos[i] = int32(rng.IntN(20000))
			}
			xb := upload(t, d, x)
			err := d.Rope(s, RopeArgs{X: xb, Pos: upload(t, d, pos), T: tc.T, Heads: tc.heads, HeadDim: tc.hd, RotDim: tc.rot,
				TokStride: int64(tc.heads * tc.hd), Theta: float32(tc.theta), Mode: tc.mode, Sections: tc.sections})
			if err != nil {
				t.Fatal(err)
			}
			ref := bfSlice(x)
			half := tc.rot / 2
			for tt := 0; tt < tc.T; tt++ {
				for h := 0; h < tc.heads; h++ {
					row := ref[(tt*tc.heads+h)*tc.hd:]
					for j := 0; j < half; j++ {
						axis := 0
						if tc.mode == RopeMRoPEInterleaved {
							if j%3 == 1 && j < 3*tc.sections[1] {
								axis = 1
							} else if j%3 == 2 && j < 3*tc.sections[2] {
								axis = 2
							}
						}
						inv := 1 / math.Pow(tc.theta, float64(2*j)/float64(tc.rot))
						f := float64(float32(float64(pos[axis*tc.T+tt]) * float64(float32(inv))))
						c, sn := rb(math.Cos(f)), rb(math.Sin(f))
						a, b := row[j], row[j+half]
						row[j] = rb(rb(a*c) + rb(-b*sn))
						row[j+half] = rb(rb(b*c) + rb(a*sn))
					}
				}
			}
			checkClose(t, "rope", bfSlice(download[uint16](t, d, s, xb, n)), ref, 1e-2)
		})
	}
}

// pagedCache builds a cache with random contents for sequences of the
// given lengths, pages assigned in a shuffled order, and returns the block
// table and the K/V values per sequence [len][kvHeads*D].
func pagedCache(t *testing.T, d *Device, s *Stream, rng *rand.Rand, lens []int, pageSize, kvh, hd int) (*KVCache, Buffer, int, [][]float64, [][]float64) {
	maxPages := 0
	total := 0
	for _, l := range lens {
		p := (l + pageSize - 1) / pageSize
		maxPages = max(maxPages, p)
		total += p
	}
	c, err := d.NewKVCache(total+3, pageSize, kvh, hd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Free(d) })
	perm := rng.Perm(total + 3)
	bt := make([]int32, len(lens)*maxPages)
	next := 0
	var slots []int32
	var kAll, vAll []uint16
	ks := make([][]float64, len(lens))
	vs := make([][]float64, len(lens))
	w := kvh * hd
	for si, l := range lens {
		for p := 0; p < (l+pageSize-1)/pageSize; p++ {
			bt[si*maxPages+p] = int32(perm[next])
			next++
		}
		k := randBF16(rng, l*w, 1)
		v := randBF16(rng, l*w, 1)
		ks[si], vs[si] = bfSlice(k), bfSlice(v)
		kAll = append(kAll, k...)
		vAll = append(vAll, v...)
		for i := 0; i < l; i++ {
			slots = append(slots, bt[si*maxPages+i/pageSize]*int32(pageSize)+int32(i%pageSize))
		}
	}
	if err := d.StoreKV(s, c, upload(t, d, kAll), upload(t, d, vAll), int64(w), int64(w), upload(t, d, slots), len(slots)); err != nil {
		t.Fatal(err)
	}
	return c, upload(t, d, bt), maxPages, ks, vs
}

// refAttention computes one query head's attention over keys 0..last.
func refAttention(q []float64, ks, vs []float64, last, kvh, hk, hd int, scale float64) []float64 {
	w := kvh * hd
	scores := make([]float64, last+1)
	mx := math.Inf(-1)
	for t := 0; t <= last; t++ {
		var a float64
		for i := 0; i < hd; i++ {
			a += q[i] * ks[t*w+hk*hd+i]
		}
		scores[t] = a * scale
		mx = math.Max(mx, scores[t])
	}
	var sum float64
	out := make([]float64, hd)
	for t := 0; t <= last; t++ {
		p := math.Exp(scores[t] - mx)
		sum += p
		for i := 0; i < hd; i++ {
			out[i] += p * vs[t*w+hk*hd+i]
		}
	}
	for i := range out {
		out[i] = rb(out[i] / sum)
	}
	return out
}

func TestAttentionDecode(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(4, 1))
	for _, tc := range []struct {
		name        string
		lens        []int
		hq, kvh, hd int
		splits      int
	}{
		{"qwen3moe_d128_g8", []int{1, 100, 1500}, 32, 4, 128, 1},
		{"qwen3moe_d128_g8_split", []int{1, 100, 1500}, 32, 4, 128, 0},
		{"qwen35_d256_g8_split", []int{7, 3000}, 16, 2, 256, 0},
		{"qwen3_235b_d128_g16", []int{513}, 64, 4, 128, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, bt, maxPages, ks, vs := pagedCache(t, d, s, rng, tc.lens, 16, tc.kvh, tc.hd)
			B := len(tc.lens)
			q := randBF16(rng, B*tc.hq*tc.hd, 1)
			lens := make([]int32, B)
			maxLen := 0
			for i, l := range tc.lens {
				lens[i] = int32(l)
				maxLen = max(maxLen, l)
			}
			splits := tc.splits
			if splits == 0 {
				splits = d.DecodeSplits(B, tc.kvh, maxLen)
			}
			ws, err := d.Alloc(DecodeWorkspaceBytes(B, tc.hq, tc.hd, splits), "ws")
			if err != nil {
				t.Fatal(err)
			}
			defer d.Free(ws)
			out := poisoned(t, d, int64(B*tc.hq*tc.hd*2))
			scale := 1 / math.Sqrt(float64(tc.hd))
			err = d.AttentionDecode(s, DecodeArgs{Out: out, Q: upload(t, d, q), QStride: int64(tc.hq * tc.hd), Cache: c, BlockTable: bt,
				MaxPages: maxPages, SeqLens: upload(t, d, lens), B: B, QHeads: tc.hq, Scale: float32(scale), Splits: splits, Work: &AttnWorkspace{ws}})
			if err != nil {
				t.Fatal(err)
			}
			var ref []float64
			G := tc.hq / tc.kvh
			for b := 0; b < B; b++ {
				for h := 0; h < tc.hq; h++ {
					qh := bfSlice(q[(b*tc.hq+h)*tc.hd : (b*tc.hq+h+1)*tc.hd])
					ref = append(ref, refAttention(qh, ks[b], vs[b], tc.lens[b]-1, tc.kvh, h/G, tc.hd, scale)...)
				}
			}
			t.Logf("splits=%d", splits)
			checkClose(t, "decode", bfSlice(download[uint16](t, d, s, out, len(ref))), ref, 1e-2)
		})
	}
}

func TestAttentionPrefill(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(5, 1))
	for _, tc := range []struct {
		name        string
		ctx, qlen   []int // cached tokens (new included) and new tokens per sequence
		hq, kvh, hd int
	}{
		{"qwen3moe_fresh_and_prefix", []int{37, 250}, []int{37, 100}, 32, 4, 128},
		{"qwen35_d256", []int{70, 5}, []int{70, 5}, 16, 2, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, bt, maxPages, ks, vs := pagedCache(t, d, s, rng, tc.ctx, 16, tc.kvh, tc.hd)
			B := len(tc.ctx)
			cu := []int32{0}
			ctx := make([]int32, B)
			maxQ := 0
			for i := range tc.ctx {
				cu = append(cu, cu[i]+int32(tc.qlen[i]))
				ctx[i] = int32(tc.ctx[i])
				maxQ = max(maxQ, tc.qlen[i])
			}
			T := int(cu[B])
			w := tc.hq * tc.hd
			q := randBF16(rng, T*w, 1)
			out := poisoned(t, d, int64(T*w*2))
			scale := 1 / math.Sqrt(float64(tc.hd))
			err := d.AttentionPrefill(s, PrefillArgs{Out: out, OutStride: int64(w), Q: upload(t, d, q), QStride: int64(w), Cache: c,
				BlockTable: bt, MaxPages: maxPages, CuQ: upload(t, d, cu), CtxLens: upload(t, d, ctx), B: B, T: T, MaxQLen: maxQ,
				QHeads: tc.hq, Scale: float32(scale)})
			if err != nil {
				t.Fatal(err)
			}
			var ref []float64
			G := tc.hq / tc.kvh
			for b := 0; b < B; b++ {
				for i := 0; i < tc.qlen[b]; i++ {
					tok := int(cu[b]) + i
					pos := tc.ctx[b] - tc.qlen[b] + i
					for h := 0; h < tc.hq; h++ {
						qh := bfSlice(q[tok*w+h*tc.hd : tok*w+(h+1)*tc.hd])
						ref = append(ref, refAttention(qh, ks[b], vs[b], pos, tc.kvh, h/G, tc.hd, scale)...)
					}
				}
			}
			checkClose(t, "prefill", bfSlice(download[uint16](t, d, s, out, len(ref))), ref, 1e-2)
		})
	}
}

func TestConv1D(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(6, 1))
	const C, K = 8192, 4 // Qwen3-Next conv dim: 2*16*128 + 32*128
	lens := []int{70, 3} // two sequences in one prefill batch
	slots := []int32{2, 0}
	x1 := [][]uint16{randBF16(rng, lens[0]*C, 1), randBF16(rng, lens[1]*C, 1)}
	x2 := [][]uint16{randBF16(rng, C, 1), randBF16(rng, C, 1)} // one decode token each
	w := randBF16(rng, C*K, 0.5)
	bias := randBF16(rng, C, 0.1)
	state, err := d.Alloc(3*(K-1)*C*2, "conv state")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(state)
	if err := s.Memset(state, 0); err != nil {
		t.Fatal(err)
	}
	run := func(xs [][]uint16, ls []int) []float64 {
		var all []uint16
		cu := []int32{0}
		maxLen := 0
		for i, x := range xs {
			all = append(all, x...)
			cu = append(cu, cu[i]+int32(ls[i]))
			maxLen = max(maxLen, ls[i])
		}
		T := int(cu[len(ls)])
		out := poisoned(t, d, int64(T*C*2))
		err := d.Conv1D(s, ConvArgs{Out: out, OutStride: C, X: upload(t, d, all), XStride: C, W: upload(t, d, w), Bias: upload(t, d, bias),
			State: state, Cu: upload(t, d, cu), Slots: upload(t, d, slots), B: len(ls), T: T, MaxLen: maxLen, C: C, K: K})
		if err != nil {
			t.Fatal(err)
		}
		return bfSlice(download[uint16](t, d, s, out, T*C))
	}
	got := append(run(x1, lens), run(x2, []int{1, 1})...)
	// Reference: each sequence's full history, conv from zeros.
	var ref1, ref2 []float64
	for si := range lens {
		hist := append(bfSlice(x1[si]), bfSlice(x2[si])...)
		n := lens[si] + 1
		for tt := 0; tt < n; tt++ {
			row := make([]float64, C)
			for c := 0; c < C; c++ {
				a := bf(bias[c])
				for j := 0; j < K; j++ {
					if src := tt - K + 1 + j; src >= 0 {
						a += bf(w[c*K+j]) * hist[src*C+c]
					}
				}
				a = rb(a)
				row[c] = rb(a / (1 + math.Exp(-a)))
			}
			if tt < lens[si] {
				ref1 = append(ref1, row...)
			} else {
				ref2 = append(ref2, row...)
			}
		}
	}
	checkClose(t, "conv1d", got, append(ref1, ref2...), 1e-2)
}

func TestGatedDeltaRule(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(7, 1))
	const Hk, Hv, Dk, Dv = 4, 8, 128, 128 // Qwen3-Next ratios (16/32 heads), fewer heads
	qkvW := 2*Hk*Dk + Hv*Dv
	lens := []int{23, 1}
	slots := []int32{1, 0}
	B := len(lens)
	state, err := d.Alloc(int64(2*Hv*Dk*Dv*4), "gdn state")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(state)
	if err := s.Memset(state, 0); err != nil {
		t.Fatal(err)
	}
	// Reference states per sequence.
	refS := make([][]float64, B)
	for i := range refS {
		refS[i] = make([]float64, Hv*Dk*Dv)
	}
	step := func(ls []int) {
		cu := []int32{0}
		for i, l := range ls {
			cu = append(cu, cu[i]+int32(l))
		}
		T := int(cu[B])
		qkv := randBF16(rng, T*qkvW, 1)
		a := randBF16(rng, T*Hv, 1)
		bb := randBF16(rng, T*Hv, 1)
		aLog := make([]float32, Hv)
		dt := make([]float32, Hv)
		for h := range aLog {
			aLog[h] = float32(rng.Float64()*2 - 1)
			dt[h] = float32(rng.Float64() - 0.5)
		}
		g := poisoned(t, d, int64(T*Hv*4))
		beta := poisoned(t, d, int64(T*Hv*4))
		if err := d.GDNGates(s, g, beta, upload(t, d, a), upload(t, d, bb), Hv, Hv, upload(t, d, aLog), upload(t, d, dt), T, Hv); err != nil {
			t.Fatal(err)
		}
		qb := upload(t, d, qkv)
		out := poisoned(t, d, int64(T*Hv*Dv*2))
		err := d.GatedDeltaRule(s, GDNArgs{Out: out, OutStride: Hv * Dv, Q: qb, K: qb.Slice(Hk*Dk*2, qb.Size-Hk*Dk*2),
			V: qb.Slice(2*Hk*Dk*2, qb.Size-2*Hk*Dk*2), QKVStride: int64(qkvW), G: g, Beta: beta, State: state,
			Cu: upload(t, d, cu), Slots: upload(t, d, slots), B: B, T: T, Hk: Hk, Hv: Hv, Dk: Dk, Dv: Dv})
		if err != nil {
			t.Fatal(err)
		}
		gotG := download[float32](t, d, s, g, T*Hv)
		gotB := download[float32](t, d, s, beta, T*Hv)
		got := bfSlice(download[uint16](t, d, s, out, T*Hv*Dv))
		var ref, refG, refB []float64
		l2 := func(x []float64) []float64 {
			var ss float64
			for _, v := range x {
				ss += rb(v * v)
			}
			r := rb(1 / math.Sqrt(rb(rb(ss)+1e-6)))
			o := make([]float64, len(x))
			for i, v := range x {
				o[i] = rb(v * r)
			}
			return o
		}
		for si := 0; si < B; si++ {
			S := refS[si]
			for tt := int(cu[si]); tt < int(cu[si+1]); tt++ {
				row := bfSlice(qkv[tt*qkvW : (tt+1)*qkvW])
				for h := 0; h < Hv; h++ {
					hk := h / (Hv / Hk)
					x := bf(a[tt*Hv+h]) + float64(dt[h])
					sp := math.Log1p(math.Exp(x))
					gv := -math.Exp(float64(aLog[h])) * sp
					bv := rb(1 / (1 + math.Exp(-bf(bb[tt*Hv+h]))))
					refG = append(refG, gv)
					refB = append(refB, bv)
					q := l2(row[hk*Dk : (hk+1)*Dk])
					k := l2(row[Hk*Dk+hk*Dk : Hk*Dk+(hk+1)*Dk])
					v := row[2*Hk*Dk+h*Dv : 2*Hk*Dk+(h+1)*Dv]
					Sh := S[h*Dk*Dv : (h+1)*Dk*Dv]
					decay := math.Exp(gv)
					for j := 0; j < Dv; j++ {
						var mem float64
						for i := 0; i < Dk; i++ {
							Sh[i*Dv+j] *= decay
							mem += Sh[i*Dv+j] * k[i]
						}
						delta := (v[j] - mem) * bv
						var o float64
						for i := 0; i < Dk; i++ {
							Sh[i*Dv+j] += k[i] * delta
							o += Sh[i*Dv+j] * q[i] / math.Sqrt(Dk)
						}
						ref = append(ref, rb(o))
					}
				}
			}
		}
		checkClose(t, "g", f64s(gotG), refG, 1e-5)
		checkClose(t, "beta", f64s(gotB), refB, 1e-6)
		checkClose(t, "gdn out", got, ref, 1e-2)
	}
	step(lens)        // prefill chunk for sequence 0 (23 tokens) and one token for sequence 1
	step([]int{1, 1}) // decode step continuing both from their states
	step([]int{5, 2}) // a second chunk (chunked prefill)
}

func f64s(x []float32) []float64 {
	o := make([]float64, len(x))
	for i, v := range x {
		o[i] = float64(v)
	}
	return o
}

func TestRouterTopK(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(8, 1))
	for _, tc := range []struct {
		T, E, k int
		norm    bool
	}{{5, 128, 8, true}, {3, 512, 10, true}, {4, 256, 8, false}} {
		t.Run(fmt.Sprintf("E%d_k%d", tc.E, tc.k), func(t *testing.T) {
			logits := randBF16(rng, tc.T*tc.E, 2)
			ids := poisoned(t, d, int64(tc.T*tc.k*4))
			wts := poisoned(t, d, int64(tc.T*tc.k*4))
			if err := d.RouterTopK(s, ids, wts, upload(t, d, logits), tc.T, tc.E, tc.k, tc.norm); err != nil {
				t.Fatal(err)
			}
			gotIDs := download[int32](t, d, s, ids, tc.T*tc.k)
			gotW := download[float32](t, d, s, wts, tc.T*tc.k)
			var refW []float64
			for tt := 0; tt < tc.T; tt++ {
				l := bfSlice(logits[tt*tc.E : (tt+1)*tc.E])
				mx := math.Inf(-1)
				for _, v := range l {
					mx = math.Max(mx, v)
				}
				p := make([]float64, tc.E)
				var sum float64
				for i, v := range l {
					p[i] = math.Exp(v - mx)
					sum += p[i]
				}
				idx := make([]int, tc.E)
				for i := range idx {
					idx[i] = i
				}
				sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
				var tot float64
				for r := 0; r < tc.k; r++ {
					tot += p[idx[r]] / sum
				}
				for r := 0; r < tc.k; r++ {
					if int(gotIDs[tt*tc.k+r]) != idx[r] {
						t.Fatalf("token %d slot %d: expert %d, want %d", tt, r, gotIDs[tt*tc.k+r], idx[r])
					}
					w := p[idx[r]] / sum
					if tc.norm {
						w /= tot
					}
					refW = append(refW, rb(w))
				}
			}
			checkClose(t, "weights", f64s(gotW), refW, 1e-2)
		})
	}
}

func TestExpertFFN(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(9, 1))
	const E, H, I, k = 16, 512, 256, 4
	w13 := randBF16(rng, E*2*I*H, 0.05)
	w2 := randBF16(rng, E*H*I, 0.05)
	ex := &Experts{W13: upload(t, d, w13), W2: upload(t, d, w2), E: E, H: H, I: I}
	ws, err := d.NewMoEWorkspace(128, k, ex)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Free(d)
	for _, tc := range []struct {
		name string
		T    int
		emap bool
		acc  bool
	}{{"decode_T1", 1, false, false}, {"T5_accumulate", 5, false, true}, {"T7_half_on_gpu", 7, true, false}, {"prefill_T100_cublaslt", 100, false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			x := randBF16(rng, tc.T*H, 1)
			ids := make([]int32, tc.T*k)
			wts := make([]float32, tc.T*k)
			for tt := 0; tt < tc.T; tt++ {
				p := rng.Perm(E)
				for j := 0; j < k; j++ {
					ids[tt*k+j] = int32(p[j])
					wts[tt*k+j] = float32(rb(rng.Float64()))
				}
			}
			var emapB Buffer
			emap := make([]int32, E)
			for e := range emap {
				emap[e] = int32(e)
				if tc.emap && e%2 == 1 {
					emap[e] = -1 // odd experts live on the CPU
				}
			}
			if tc.emap {
				emapB = upload(t, d, emap)
			}
			var out Buffer
			out0 := randBF16(rng, tc.T*H, 1)
			if tc.acc {
				out = upload(t, d, out0)
			} else {
				out = poisoned(t, d, int64(tc.T*H*2))
			}
			if err := d.ExpertFFN(s, out, upload(t, d, x), upload(t, d, ids), upload(t, d, wts), tc.T, ex, ws, emapB, tc.acc); err != nil {
				t.Fatal(err)
			}
			ref := make([]float64, tc.T*H)
			for tt := 0; tt < tc.T; tt++ {
				xs := bfSlice(x[tt*H : (tt+1)*H])
				acc := make([]float64, H)
				if tc.acc {
					copy(acc, bfSlice(out0[tt*H:(tt+1)*H]))
				}
				for j := 0; j < k; j++ {
					e := int(ids[tt*k+j])
					if emap[e] < 0 {
						continue
					}
					act := make([]float64, I)
					for i := 0; i < I; i++ {
						var g, u float64
						for h := 0; h < H; h++ {
							g += xs[h] * bf(w13[(e*2*I+i)*H+h])
							u += xs[h] * bf(w13[(e*2*I+I+i)*H+h])
						}
						g, u = rb(g), rb(u)
						act[i] = rb(rb(g/(1+math.Exp(-g))) * u)
					}
					for h := 0; h < H; h++ {
						var y float64
						for i := 0; i < I; i++ {
							y += act[i] * bf(w2[(e*H+h)*I+i])
						}
						acc[h] += rb(float64(wts[tt*k+j]) * rb(y))
					}
				}
				for h := range acc {
					ref[tt*H+h] = rb(acc[h])
				}
			}
			checkClose(t, "experts", bfSlice(download[uint16](t, d, s, out, tc.T*H)), ref, 1e-2)
		})
	}
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
	if err := d.Pick(s, out, lb, pb, B, V); err != nil {
		t.Fatal(err)
	}
	check("m_pick_rows", download[float32](t, d, s, out, 2*B))
	// pickClusterRows rows at a time: m_pick, a cluster per row on sm_90
	out = poisoned(t, d, int64(B*8))
	for b0 := 0; b0 < B; b0 += pickClusterRows {
		n := min(pickClusterRows, B-b0)
		if err := d.Pick(s, out.Slice(int64(b0*8), int64(n*8)), lb.Slice(int64(b0*V*4), int64(n*V*4)), pb.Slice(int64(b0*32), int64(n*32)), n, V); err != nil {
			t.Fatal(err)
		}
	}
	check("m_pick", download[float32](t, d, s, out, 2*B))
	// no params: every row greedy
	if err := d.Pick(s, out, lb, Buffer{}, B, V); err != nil {
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

func TestFP8Dequant(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(11, 1))
	const N, K, blk = 300, 260, 128
	q := make([]uint8, N*K)
	for i := range q {
		q[i] = uint8(rng.IntN(256))
		if q[i]&0x7f == 0x7f {
			q[i] = 0 // NaN patterns aside
		}
	}
	nb := ((N + blk - 1) / blk) * ((K + blk - 1) / blk)
	sc := make([]float32, nb)
	for i := range sc {
		sc[i] = float32(rng.Float64() + 0.1)
	}
	out := poisoned(t, d, N*K*2)
	if err := d.DequantFP8Block(s, out, upload(t, d, q), upload(t, d, sc), N, K, blk); err != nil {
		t.Fatal(err)
	}
	ref := make([]float64, N*K)
	for n := 0; n < N; n++ {
		for k := 0; k < K; k++ {
			ref[n*K+k] = rb(float64(tensor.F8E4M3ToF32(q[n*K+k]) * sc[(n/blk)*((K+blk-1)/blk)+k/blk]))
		}
	}
	checkClose(t, "fp8", bfSlice(download[uint16](t, d, s, out, N*K)), ref, 1e-6)
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
