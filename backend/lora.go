package backend

import "fmt"

// LoRAOps is implemented by backends that run per-request LoRA deltas
// (both kt backends do). A model computes a module's delta with two MatMuls
// (d = (x Aᵀ) Bᵀ) and adds it with LoRAAdd, which keeps only the rows of
// the sequences that asked for the adapter, so one step may mix requests
// with and without it.
type LoRAOps interface {
	// LoRAAdd adds scale·d[i] to out[i] for the rows i < n whose step
	// sequence has Seq.Adapter == adapter; adapter < 0 selects every row.
	// out and d have the same width.
	LoRAAdd(out, d Tensor, scale float32, adapter, n int)
}

// StepHasAdapter reports whether some sequence of s uses adapter (adapter
// < 0: always, when s has rows).
func StepHasAdapter(s *Step, adapter int) bool {
	if adapter < 0 {
		return len(s.Tokens) > 0
	}
	for _, q := range s.Seqs {
		if q.Adapter == adapter {
			return true
		}
	}
	return false
}

// ExpertLoRA is one MoE layer's expert LoRA (SGLang-KT's CPU expert LoRA,
// applied to every token): per expert e, with s = Scale,
// g = W_g x + s·B_g(A_g x), u = W_u x + s·B_u(A_u x), h = silu(g)·u,
// y = W_d h + s·B_d(A_d h). Factors are float32, stacked per expert in
// KT's fused shapes: GateA, UpA [E][r][H]; GateB, UpB [E][I][r];
// DownA [E][r][I]; DownB [E][H][r]. The CPU backend's MoE op implements it
// (the reference the CPU expert engine is tested against); the GPU's
// refuses it, as SGLang-KT serves expert LoRA on CPU experts only.
type ExpertLoRA struct {
	Rank                                 int
	Scale                                float32
	GateA, GateB, UpA, UpB, DownA, DownB []float32
}

// Check validates the factors' lengths against e experts of hidden h and
// intermediate i.
func (l *ExpertLoRA) Check(e, h, i int) error {
	r := l.Rank
	if r < 1 {
		return fmt.Errorf("expert LoRA rank %d", r)
	}
	for _, f := range []struct {
		name string
		v    []float32
		n    int
	}{
		{"gate A", l.GateA, e * r * h}, {"gate B", l.GateB, e * i * r}, {"up A", l.UpA, e * r * h},
		{"up B", l.UpB, e * i * r}, {"down A", l.DownA, e * r * i}, {"down B", l.DownB, e * h * r},
	} {
		if len(f.v) != f.n {
			return fmt.Errorf("expert LoRA %s has %d values, want %d (%d experts, rank %d, hidden %d, intermediate %d)", f.name, len(f.v), f.n, e, r, h, i)
		}
	}
	return nil
}

// LoRADelta adds s·B(A x) to out for one row: A [r][in] (row stride in),
// B [out][r]; mid is scratch of r values.
func LoRADelta(out, x, a, b, mid []float32, s float32) {
	r, in := len(mid), len(x)
	for j := 0; j < r; j++ {
		var acc float32
		aj := a[j*in : (j+1)*in]
		for k, v := range x {
			acc += aj[k] * v
		}
		mid[j] = acc
	}
	for o := range out {
		var acc float32
		bo := b[o*r : (o+1)*r]
		for j, v := range mid {
			acc += bo[j] * v
		}
		out[o] += s * acc
	}
}
