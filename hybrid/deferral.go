package hybrid

import (
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/tensor"
)

// Expert deferral (--kt-max-deferred-experts-per-token D, SGLang-KT's
// deferred experts; kt-kernel python/experts_base.py submit_forward and
// select_deferred_experts, SGLang layers/moe/kt_ep_wrapper.py):
//
//   - per token, the k−D routed experts of highest router weight are
//     protected; an expert protected for any token of the step is
//     protected for every token (the batch-wide OR of the protected ids);
//   - a MoE layer's protected picks are its immediate task, the others its
//     deferred task; both use the full top-k weights (no renormalisation);
//   - the immediate output is the layer's routed-expert output; the
//     deferred output is added to the next MoE layer's (its immediate task
//     adds onto it), so it may finish while the GPU runs that layer's
//     attention;
//   - the last MoE layer never defers (SGLang sets D = 0 on the model's
//     last layer), so a step ends with nothing pending;
//   - D = 0 is today's single task; D ≥ k defers every expert of a layer.
//
// It applies to every step, prefill and decode alike, as in SGLang-KT.

// SplitDeferred splits the top-k picks of n tokens (ids, row-major
// [n][k], and their router weights) into the immediate and the deferred
// picks for deferring d experts per token: imm and def get ids[i] or −1.
// Ids outside [0, experts) go to neither. Among equal weights the earlier
// pick is protected first. Every slice must hold n·k values; flag is
// scratch of experts values; k is at most 64.
func SplitDeferred(ids []int32, wts []float32, n, k, d, experts int, imm, def []int32, flag []bool) {
	pk := max(0, k-d) // protected_k
	clear(flag[:experts])
	for t := range n {
		row, w := ids[t*k:(t+1)*k], wts[t*k:(t+1)*k]
		// the pk highest weights of the row: pk small, a selection
		// pass per protected slot keeps this allocation-free
		var taken uint64 // slots already chosen
		for range pk {
			best := -1
			for j := range k {
				if taken&(1<<j) != 0 {
					continue
				}
				if best < 0 || w[j] > w[best] {
					best = j
				}
			}
			if best < 0 {
				break
			}
			taken |= 1 << best
			if id := row[best]; id >= 0 && int(id) < experts {
				flag[id] = true
			}
		}
	}
	for i := range n * k {
		id := ids[i]
		imm[i], def[i] = -1, -1
		switch {
		case id < 0 || int(id) >= experts:
		case flag[id]:
			imm[i] = id
		default:
			def[i] = id
		}
	}
}

// maxDeferTopK is the largest top-k SplitDeferred's slot mask serves.
const maxDeferTopK = 64

// DeferralPlan returns the number of experts per token each model layer
// defers for --kt-max-deferred-experts-per-token d: min(d, k) on a MoE
// layer whose routed experts run as a task (cpu[l]) and whose next MoE
// layer's do too (the deferred output is added there), 0 elsewhere — on
// the last MoE layer always. moe[l] says whether layer l is a MoE layer.
func DeferralPlan(moe, cpu []bool, d, k int) []int {
	plan := make([]int, len(moe))
	if d <= 0 {
		return plan
	}
	next := -1 // the next MoE layer after l
	for l := len(moe) - 1; l >= 0; l-- {
		if !moe[l] {
			continue
		}
		if next >= 0 && cpu[l] && cpu[next] {
			plan[l] = min(d, k)
		}
		next = l
	}
	return plan
}

// deferral is the state of expert deferral over one step's MoE layers.
type deferral struct {
	plan     []int // experts deferred per token, per model layer
	order    []int // per model layer: its index among the MoE layers (slot parity), −1 for a dense one
	first    int   // the first MoE layer (a step starts there: nothing is pending)
	k, E     int
	pending  bool // a deferred output waits for the next MoE layer
	imm, def []int32
	flag     []bool
	// the reference path (the backend's MoE op on the CPU backend)
	refImm, refDef, refOut backend.Tensor
}

// newDeferral sets up deferral d for the MoE layers of layers (nil for a
// dense one) whose experts run as a task where cpu[l]; nil when no layer
// defers.
func newDeferral(layers []*Weights, cpu []bool, d, k, E, maxTok int) (*deferral, error) {
	if d < 0 {
		return nil, fmt.Errorf("--kt-max-deferred-experts-per-token %d: must not be negative", d)
	}
	if d == 0 {
		return nil, nil
	}
	if k > maxDeferTopK {
		return nil, fmt.Errorf("--kt-max-deferred-experts-per-token: top-k %d above %d is not supported", k, maxDeferTopK)
	}
	moe := make([]bool, len(layers))
	f := &deferral{order: make([]int, len(layers)), first: -1, k: k, E: E}
	n := 0
	for l, w := range layers {
		f.order[l] = -1
		if w != nil {
			moe[l] = true
			f.order[l] = n
			n++
			if f.first < 0 {
				f.first = l
			}
		}
	}
	f.plan = DeferralPlan(moe, cpu, d, k)
	some := false
	for _, p := range f.plan {
		some = some || p > 0
	}
	if !some {
		return nil, nil
	}
	f.imm, f.def = make([]int32, maxTok*k), make([]int32, maxTok*k)
	f.flag = make([]bool, E)
	return f, nil
}

// begin is called at the start of layer l: it reports the experts per
// token the layer defers and whether a deferred output of the previous
// MoE layer is to be added to this one's.
func (f *deferral) begin(l int) (d int, pending bool) {
	if l == f.first {
		f.pending = false
	}
	return f.plan[l], f.pending
}

// split fills f.imm and f.def from n tokens' ids and weights for d.
func (f *deferral) split(ids []int32, wts []float32, n, d int) {
	SplitDeferred(ids, wts, n, f.k, d, f.E, f.imm[:n*f.k], f.def[:n*f.k], f.flag)
}

// keepDevice moves the deferred picks of device experts (gpu[e]; nil:
// none) of n tokens back to the immediate ones: device experts are never
// deferred (the engine skips them and the device computes them at once),
// on the reference path as on the engine's and the hybrid step's, so that
// the split is the same whichever rank holds a device expert.
func (f *deferral) keepDevice(gpu []bool, n int) {
	if gpu == nil {
		return
	}
	for i, id := range f.def[:n*f.k] {
		if id >= 0 && int(id) < len(gpu) && gpu[id] {
			f.imm[i], f.def[i] = id, -1
		}
	}
}

// describe says what deferral does, for Path.
func (f *deferral) describe() string {
	if f == nil {
		return ""
	}
	d := 0
	for _, p := range f.plan {
		d = max(d, p)
	}
	return fmt.Sprintf("; deferral: %d of %d experts per token may land in the next MoE layer (the last MoE layer defers none)", d, f.k)
}

// refStart is deferral on the reference path, the backend's MoE op on the
// CPU backend: out = MoE(immediate picks) + the previous layer's deferred
// output; the deferred picks' output is kept for the next MoE layer.
func (x *Experts) refStart(l int, out, h backend.Tensor, w *Weights, wts, ids backend.Tensor, n int) error {
	f := x.def
	d, pending := f.begin(l)
	if d == 0 && !pending {
		x.rb.BE.MoE(out, h, &w.Experts, wts, ids, n)
		return nil
	}
	be := x.rb.BE
	if err := x.rb.Sync(); err != nil {
		return err
	}
	if f.refImm == nil {
		T := x.rb.Opts.MaxBatchTokens
		var err error
		if f.refImm, err = be.Alloc(tensor.I32, T, f.k); err == nil {
			if f.refDef, err = be.Alloc(tensor.I32, T, f.k); err == nil {
				f.refOut, err = be.Alloc(tensor.F32, T, w.Hidden)
			}
		}
		if err != nil {
			return fmt.Errorf("deferral buffers: %w", err)
		}
	}
	ct := func(t backend.Tensor) *cpu.Tensor { return t.(*cpu.Tensor) }
	immIDs := ids
	if d > 0 {
		f.split(ct(ids).I32()[:n*f.k], ct(wts).F32()[:n*f.k], n, d)
		f.keepDevice(w.GPU, n)
		copy(ct(f.refImm).I32(), f.imm[:n*f.k])
		copy(ct(f.refDef).I32(), f.def[:n*f.k])
		immIDs = f.refImm
	}
	be.MoE(out, h, &w.Experts, wts, immIDs, n)
	if pending {
		be.Add(out, out, f.refOut, n)
	}
	if d > 0 {
		be.MoE(f.refOut, h, &w.Experts, wts, f.refDef, n)
	}
	f.pending = d > 0
	return x.rb.Sync()
}
