package cpu

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/ktserve/kt/backend"
)

// l2Eps is the epsilon of the q/k l2 normalisation (transformers and FLA use 1e-6).
const l2Eps = 1e-6

// L2Normalize scales each row of x (rows of width dim) to unit length:
// x·rsqrt(Σx²+1e-6), then multiplies it by scale. out may alias x.
func L2Normalize(x []float32, rows, dim int, scale float32, out []float32) error {
	if rows < 0 || dim <= 0 || len(x) < rows*dim || len(out) < rows*dim {
		return fmt.Errorf("l2 normalize: %d rows of %d do not fit x (%d) or out (%d)", rows, dim, len(x), len(out))
	}
	for r := 0; r < rows; r++ {
		l2Row(x[r*dim:(r+1)*dim], scale, out[r*dim:(r+1)*dim])
	}
	return nil
}

func l2Row(x []float32, scale float32, out []float32) {
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	inv := float32(1 / math.Sqrt(float64(ss+l2Eps)))
	for i, v := range x {
		out[i] = (v * inv) * scale
	}
}

// DeltaState is one sequence's state for one Gated DeltaNet layer in the
// chunked form: the recurrent state at the last chunk boundary plus the rows
// of the chunk being filled. Rows are appended one token at a time, in the
// same arithmetic order whether the token arrives in a long prefill or as a
// single decode step, so a prompt prefilled in pieces yields bit-identical
// outputs and state to one prefill. The slices alias kvcache.LayerState.
type DeltaState struct {
	// S is the recurrent state at the start of the open chunk,
	// [VHeads, KDim, VDim] row-major (transformers' layout).
	S []float32
	// K holds the open chunk's l2-normalised keys, [DeltaChunkSize, KHeads, KDim].
	K []float32
	// V holds the open chunk's corrected values ("v_new"), [DeltaChunkSize, VHeads, VDim].
	V []float32
	// G holds the open chunk's cumulative log decay, [DeltaChunkSize, VHeads].
	G []float32
	// Rows is the number of filled rows of the open chunk (0 <= Rows < DeltaChunkSize).
	Rows int
}

// Check reports a state whose buffers do not fit shape s.
func (st *DeltaState) Check(s backend.DeltaShape) error {
	switch {
	case len(st.S) != s.StateLen():
		return fmt.Errorf("gated delta state: S has %d values, want %d", len(st.S), s.StateLen())
	case len(st.K) != backend.DeltaChunkSize*s.KHeads*s.KDim:
		return fmt.Errorf("gated delta state: K has %d values, want %d", len(st.K), backend.DeltaChunkSize*s.KHeads*s.KDim)
	case len(st.V) != backend.DeltaChunkSize*s.VHeads*s.VDim:
		return fmt.Errorf("gated delta state: V has %d values, want %d", len(st.V), backend.DeltaChunkSize*s.VHeads*s.VDim)
	case len(st.G) != backend.DeltaChunkSize*s.VHeads:
		return fmt.Errorf("gated delta state: G has %d values, want %d", len(st.G), backend.DeltaChunkSize*s.VHeads)
	case st.Rows < 0 || st.Rows >= backend.DeltaChunkSize:
		return fmt.Errorf("gated delta state: %d open rows, want 0..%d", st.Rows, backend.DeltaChunkSize-1)
	}
	return nil
}

// GatedDeltaRule runs n tokens of one sequence through the gated delta rule
// in its chunked (WY) form, continuing from st and advancing it. Layouts are
// those of backend.LinearAttention.GatedDeltaRule.
//
// Within a chunk of backend.DeltaChunkSize tokens aligned to absolute
// positions, token i's corrected value is
//
//	u_i = β_i·(v_i − e^{G_i}·k_iᵀS) − Σ_{j<i} β_i (k_i·k_j) e^{G_i−G_j} u_j
//
// (the forward substitution of transformers' UT system), its output is
//
//	o_i = e^{G_i}·q_iᵀS + Σ_{j≤i} (q_i·k_j) e^{G_i−G_j} u_j
//
// and at the chunk end S ← e^{G_last}·S + Σ_j e^{G_last−G_j} k_j u_jᵀ, where S is
// the state at the chunk start and G the cumulative log decay within the
// chunk. Rows are computed one token at a time in a fixed order, so the
// result does not depend on how a sequence's tokens are split across calls.
func GatedDeltaRule(q, k, v, g, beta []float32, n int, sh backend.DeltaShape, st *DeltaState, out []float32) error {
	return gatedDeltaRule(deltaISA(), deltaParallel, q, k, v, sh.KHeads*sh.KDim, sh.VHeads*sh.VDim, g, beta, n, sh, st, out)
}

// gatedDeltaRule runs GatedDeltaRule with kernel variant isa, spreading the
// key-head groups with par.
// q and k rows are ldqk floats apart and v rows ldv (a q|k|v row of the conv
// output has ldqk = ldv = ConvChannels).
func gatedDeltaRule(isa int, par func(n int, fn func(i int)), q, k, v []float32, ldqk, ldv int, g, beta []float32, n int, sh backend.DeltaShape, st *DeltaState, out []float32) error {
	if err := sh.Validate(); err != nil {
		return err
	}
	if err := st.Check(sh); err != nil {
		return err
	}
	if n <= 0 {
		return nil
	}
	kd, vd := sh.KHeads*sh.KDim, sh.VHeads*sh.VDim
	nk, nv := (n-1)*ldqk+kd, (n-1)*ldv+vd
	if ldqk < kd || ldv < vd || len(q) < nk || len(k) < nk || len(v) < nv || len(out) < n*vd || len(g) < n*sh.VHeads || len(beta) < n*sh.VHeads {
		return fmt.Errorf("gated delta rule: %d tokens do not fit the inputs (q %d, k %d, v %d, g %d, beta %d, out %d)",
			n, len(q), len(k), len(v), len(g), len(beta), len(out))
	}
	rows0 := st.Rows
	par(sh.KHeads, func(kh int) {
		deltaGroup(isa, sh, st, q, k, v, ldqk, ldv, g, beta, n, kh, rows0, out)
	})
	st.Rows = (rows0 + n) % backend.DeltaChunkSize
	return nil
}

// DeltaStateMaterialize writes into s ([VHeads, KDim, VDim]) the recurrent
// state after the last token of st: the chunk-start state with the open rows
// folded in. It is the initial state GatedDeltaRecurrent continues from.
func DeltaStateMaterialize(sh backend.DeltaShape, st *DeltaState, s []float32) error {
	if err := st.Check(sh); err != nil {
		return err
	}
	if len(s) != sh.StateLen() {
		return fmt.Errorf("gated delta materialize: state has %d values, want %d", len(s), sh.StateLen())
	}
	copy(s, st.S)
	if st.Rows > 0 {
		tmp := *st
		tmp.S = s
		deltaFlushAll(deltaISA(), sh, &tmp, st.Rows)
	}
	return nil
}

// GatedDeltaRecurrent runs n tokens of the gated delta rule one token at a
// time on the full recurrent state s ([VHeads, KDim, VDim]), as transformers'
// torch_recurrent_gated_delta_rule does:
//
//	S ← e^{g}·S;  u = β·(v − Sᵀk);  S ← S + k uᵀ;  o = Sᵀq
//
// with q and k l2-normalised and q scaled by 1/sqrt(KDim). It is the
// reference the chunked form is checked against and the form a backend may
// use for decode when it keeps the full state.
func GatedDeltaRecurrent(q, k, v, g, beta []float32, n int, sh backend.DeltaShape, s, out []float32) error {
	if err := sh.Validate(); err != nil {
		return err
	}
	nk, nv := n*sh.KHeads*sh.KDim, n*sh.VHeads*sh.VDim
	if n < 0 || len(s) != sh.StateLen() || len(q) < nk || len(k) < nk || len(v) < nv || len(out) < nv || len(g) < n*sh.VHeads || len(beta) < n*sh.VHeads {
		return fmt.Errorf("gated delta recurrent: %d tokens do not fit the inputs (state %d, q %d, k %d, v %d, g %d, beta %d, out %d)",
			n, len(s), len(q), len(k), len(v), len(g), len(beta), len(out))
	}
	dk, dv := sh.KDim, sh.VDim
	rep := sh.VHeads / sh.KHeads
	scale := float32(1 / math.Sqrt(float64(dk)))
	deltaParallel(sh.KHeads, func(kh int) {
		qn := make([]float32, dk)
		kn := make([]float32, dk)
		u := make([]float32, dv)
		for t := 0; t < n; t++ {
			base := (t*sh.KHeads + kh) * dk
			l2Row(q[base:base+dk], scale, qn)
			l2Row(k[base:base+dk], 1, kn)
			for r := 0; r < rep; r++ {
				h := kh*rep + r
				col := t*sh.VHeads + h
				e := float32(math.Exp(float64(g[col])))
				sm := s[h*dk*dv : (h+1)*dk*dv]
				clear(u)
				for d := 0; d < dk; d++ {
					row := sm[d*dv : (d+1)*dv]
					deltaScal(e, row)
					deltaAxpy(kn[d], row, u)
				}
				vi := v[col*dv : (col+1)*dv]
				for x := range u {
					u[x] = (vi[x] - u[x]) * beta[col]
				}
				o := out[col*dv : (col+1)*dv]
				clear(o)
				for d := 0; d < dk; d++ {
					row := sm[d*dv : (d+1)*dv]
					deltaAxpy(kn[d], u, row)
					deltaAxpy(qn[d], row, o)
				}
			}
		}
	})
	return nil
}

// deltaParallel runs fn(0..n-1) on up to GOMAXPROCS goroutines.
func deltaParallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// deltaAxpy computes y += a·x.
func deltaAxpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}

// deltaScal computes x *= a.
func deltaScal(a float32, x []float32) {
	for i := range x {
		x[i] *= a
	}
}
