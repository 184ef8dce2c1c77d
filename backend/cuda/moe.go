//go:build cgo

package cuda

import "fmt"

// Experts holds the routed experts resident on this GPU: W13 [E, 2I, H]
// (gate rows then up rows, as stacked from the checkpoint's gate_proj and
// up_proj) and W2 [E, H, I] (down_proj).
type Experts struct {
	W13, W2 Buffer
	E, H, I int
}

// moeBM is the row block of the grouped kernels (kernels/moe.cu MOE_BM).
const moeBM = 8

// moeLargePairs is the number of (token, expert) pairs from which ExpertFFN
// switches from the grouped streaming kernel to one cuBLASLt GEMM per
// expert (prefill). The grouped path is graph-capturable; the per-expert
// path reads the expert counts back to the host.
const moeLargePairs = 256

// MoEWorkspace holds ExpertFFN's scratch for up to MaxTokens tokens.
type MoEWorkspace struct {
	MaxTokens, K, Cap                int
	sorted, blockExpert, pos, counts Buffer
	xs, h13, act, y                  Buffer
	hostCounts                       []int32
}

// NewMoEWorkspace sizes the scratch for maxTokens tokens with top-k routing
// over ex.
func (d *Device) NewMoEWorkspace(maxTokens, k int, ex *Experts) (*MoEWorkspace, error) {
	pairs := maxTokens * k
	capRows := (pairs + ex.E*(moeBM-1) + moeBM - 1) / moeBM * moeBM
	w := &MoEWorkspace{MaxTokens: maxTokens, K: k, Cap: capRows, hostCounts: make([]int32, ex.E+1)}
	allocs := []struct {
		b    *Buffer
		n    int64
		name string
	}{
		{&w.sorted, int64(capRows) * 4, "MoE sorted rows"},
		{&w.blockExpert, int64(capRows/moeBM) * 4, "MoE block experts"},
		{&w.pos, int64(pairs) * 4, "MoE pair rows"},
		{&w.counts, int64(ex.E+1) * 4, "MoE counts"},
		{&w.xs, int64(capRows) * int64(ex.H) * bf16Size, "MoE gathered input"},
		{&w.h13, int64(capRows) * int64(2*ex.I) * bf16Size, "MoE gate/up"},
		{&w.act, int64(capRows) * int64(ex.I) * bf16Size, "MoE activation"},
		{&w.y, int64(capRows) * int64(ex.H) * bf16Size, "MoE expert output"},
	}
	for i, a := range allocs {
		b, err := d.Alloc(a.n, a.name)
		if err != nil {
			for _, p := range allocs[:i] {
				d.Free(*p.b)
			}
			return nil, err
		}
		*a.b = b
	}
	return w, nil
}

// Free releases the workspace.
func (w *MoEWorkspace) Free(d *Device) {
	for _, b := range []Buffer{w.sorted, w.blockExpert, w.pos, w.counts, w.xs, w.h13, w.act, w.y} {
		d.Free(b)
	}
}

// ExpertFFN computes the routed-expert part of a MoE layer for the experts
// on this GPU: out[t] (+)= Σ_slot w[t,slot] · down(silu(gate(x)) · up(x))
// over the slots whose expert is here. ids int32 [T, k], weights float32
// [T, k]; emap (optional, int32 [E_routed]) maps routed ids to rows of ex
// or -1 for experts elsewhere (the hybrid step's CPU experts).
func (d *Device) ExpertFFN(s *Stream, out, x, ids, weights Buffer, T int, ex *Experts, w *MoEWorkspace, emap Buffer, accumulate bool) error {
	k := w.K
	if T > w.MaxTokens {
		return fmt.Errorf("cuda: ExpertFFN: %d tokens exceed the workspace's %d", T, w.MaxTokens)
	}
	if ex.H%256 != 0 || ex.I%256 != 0 {
		return fmt.Errorf("cuda: ExpertFFN: hidden %d and intermediate %d must be multiples of 256", ex.H, ex.I)
	}
	if ex.E > 1024 {
		return fmt.Errorf("cuda: ExpertFFN: %d experts on one GPU (at most 1024)", ex.E)
	}
	if err := need("ExpertFFN", "x", x, int64(T)*int64(ex.H)*bf16Size); err != nil {
		return err
	}
	if err := need("ExpertFFN", "out", out, int64(T)*int64(ex.H)*bf16Size); err != nil {
		return err
	}
	if err := need("ExpertFFN", "W13", ex.W13, int64(ex.E)*int64(2*ex.I)*int64(ex.H)*bf16Size); err != nil {
		return err
	}
	if err := need("ExpertFFN", "W2", ex.W2, int64(ex.E)*int64(ex.H)*int64(ex.I)*bf16Size); err != nil {
		return err
	}
	pairs := T * k
	if err := d.launch(s, "moe_align", grid1(1), grid1(1024), 0,
		w.sorted, w.blockExpert, w.pos, w.counts, ids, emap, pairs, ex.E, moeBM, w.Cap); err != nil {
		return err
	}
	if err := d.launch(s, "moe_gather_bf16", grid1(w.Cap), grid1(128), 0, w.xs, x, w.sorted, w.counts, ex.E, moeBM, ex.H, k); err != nil {
		return err
	}
	if pairs < moeLargePairs {
		nb := w.Cap / moeBM
		if err := d.launch(s, "moe_gemm_bf16", grid2(nb, (2*ex.I+63)/64), grid1(256), 0,
			w.h13, w.xs, ex.W13, w.blockExpert, w.counts, ex.E, 2*ex.I, ex.H); err != nil {
			return err
		}
		if err := d.SiluMul(s, w.act, w.h13, w.Cap, ex.I, int64(2*ex.I)); err != nil {
			return err
		}
		if err := d.launch(s, "moe_gemm_bf16", grid2(nb, (ex.H+63)/64), grid1(256), 0,
			w.y, w.act, ex.W2, w.blockExpert, w.counts, ex.E, ex.H, ex.I); err != nil {
			return err
		}
	} else if err := d.expertsPerGEMM(s, ex, w); err != nil {
		return err
	}
	acc := 0
	if accumulate {
		acc = 1
	}
	return d.launch(s, "moe_combine_bf16", grid1(T), grid1(256), 0, out, w.y, w.pos, weights, ex.H, k, acc)
}

// expertsPerGEMM runs each expert's rows through cuBLASLt (prefill sizes).
func (d *Device) expertsPerGEMM(s *Stream, ex *Experts, w *MoEWorkspace) error {
	if err := s.Synchronize(); err != nil {
		return err
	}
	if err := Download(d, w.hostCounts, w.counts); err != nil {
		return err
	}
	start := 0
	for e := 0; e < ex.E; e++ {
		n := int(w.hostCounts[e])
		if n == 0 {
			continue
		}
		rows := func(b Buffer, width int) Buffer {
			return b.Slice(int64(start)*int64(width)*bf16Size, int64(n)*int64(width)*bf16Size)
		}
		w13 := ex.W13.Slice(int64(e)*int64(2*ex.I)*int64(ex.H)*bf16Size, int64(2*ex.I)*int64(ex.H)*bf16Size)
		w2 := ex.W2.Slice(int64(e)*int64(ex.H)*int64(ex.I)*bf16Size, int64(ex.H)*int64(ex.I)*bf16Size)
		if err := d.Gemm(s, GemmArgs{M: n, N: 2 * ex.I, K: ex.H, A: rows(w.xs, ex.H), B: w13, D: rows(w.h13, 2*ex.I),
			AType: bf16T, BType: bf16T, DType: bf16T}); err != nil {
			return err
		}
		if err := d.SiluMul(s, rows(w.act, ex.I), rows(w.h13, 2*ex.I), n, ex.I, int64(2*ex.I)); err != nil {
			return err
		}
		if err := d.Gemm(s, GemmArgs{M: n, N: ex.H, K: ex.I, A: rows(w.act, ex.I), B: w2, D: rows(w.y, ex.H),
			AType: bf16T, BType: bf16T, DType: bf16T}); err != nil {
			return err
		}
		start += (n + moeBM - 1) / moeBM * moeBM
	}
	return nil
}
