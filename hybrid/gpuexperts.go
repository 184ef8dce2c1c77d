package hybrid

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/placement"
	"github.com/ktserve/kt/tp"
)

// GPU experts (--kt-num-gpu-experts and its placement options): in the
// hybrid step some routed experts of each MoE layer are uploaded to the
// GPU (Placement; Load binds them), the GPU MoE op computes their share of
// the layer while the CPU expert engine, which skips them, computes the
// rest, and the two shares are summed on the GPU. With dynamic expert
// update (--kt-enable-dynamic-expert-update) the GPU expert slots of each
// layer are refilled after its layerwise prefill with the step's most
// picked experts (HottestExperts, AssignSlots, RebindSlots).
//
// On the CPU backend the placement's experts (device experts) run on the
// backend's MoE op and the engine skips them the same way: the same split
// of the work, which the tests compare against the unsplit model.
//
// With tensor parallelism the device experts of a layer are split over
// the ranks (RankShare): each rank holds and computes its share on its own
// backend, rank 0 also runs the CPU expert engine on the rest, and the
// ranks' outputs are summed by an all-reduce (Plan.Reduced). A layerwise
// prefill step (layerwise.go) splits every expert of each MoE layer over
// the ranks the same way, rank 0's engine idle; the dynamic update then
// computes the same new device experts on every rank (the routing is the
// same) and each rank takes its share of them.

// Placement returns the device expert mask of the model of config c for
// rb.Opts.GPUExperts, with the number of device experts over all MoE
// layers; nil when no routed expert goes to the device: the hybrid step
// (the GPU) or the CPU backend only (a GPU without a CPU expert method
// runs every expert on the GPU already).
func Placement(rb *runbase.Base, c *modelconfig.Config) (placement.Mask, int, error) {
	_, isCPU := rb.BE.(*cpu.Backend)
	if !(Hybrid(rb) || isCPU) || !rb.Opts.GPUExperts.Active() {
		return nil, 0, nil
	}
	moe := make([]bool, len(c.Layers))
	for l, L := range c.Layers {
		moe[l] = L.IsMoE
	}
	m, n, err := placement.Compute(moe, c.NumExperts, rb.Opts.GPUExperts)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", rb.Name, err)
	}
	return m, n, nil
}

// RankShare returns rank's share of the device experts of one layer
// (mask: true for a device expert) over size ranks: the device experts in
// id order cut into size runs, the first ones one longer where the count
// does not divide (a rank may get none). Every rank computes the same
// shares.
func RankShare(mask []bool, rank, size int) []bool {
	share := make([]bool, len(mask))
	var dev []int
	for e, on := range mask {
		if on {
			dev = append(dev, e)
		}
	}
	if size < 1 || rank < 0 || rank >= size {
		return share
	}
	per, extra := len(dev)/size, len(dev)%size
	first := rank*per + min(rank, extra)
	n := per
	if rank < extra {
		n++
	}
	for _, e := range dev[first : first+n] {
		share[e] = true
	}
	return share
}

// Plan says where a model's routed experts run over its ranks: the
// placement's device experts (Placement) and this rank's share of them,
// and, in the hybrid step with layerwise prefill, the steps in which every
// rank computes its share of every expert. Without tensor parallelism rank
// 0 computes everything.
type Plan struct {
	mask placement.Mask // nil: no device expert
	moe  []bool         // per model layer: a MoE layer
	lay  tp.Layout
	// lw is the layerwise prefill threshold when every rank takes part
	// in layerwise steps (tensor parallelism in the hybrid step), else 0;
	// rb tells whether the step being queued is a graph decode step
	lw int
	rb *runbase.Base
}

// NewPlan computes the plan of rb's rank for the model of config c.
func NewPlan(rb *runbase.Base, c *modelconfig.Config) (*Plan, error) {
	m, _, err := Placement(rb, c)
	if err != nil {
		return nil, err
	}
	moe := make([]bool, len(c.Layers))
	for l, L := range c.Layers {
		moe[l] = L.IsMoE
	}
	p := &Plan{mask: m, moe: moe, lay: rb.Layout(), rb: rb}
	if rb.Parallel() && Hybrid(rb) && rb.Opts.GPUPrefillThreshold > 0 {
		p.lw = rb.Opts.GPUPrefillThreshold
	}
	return p, nil
}

// device reports whether layer l is a MoE layer with device experts.
func (p *Plan) device(l int) bool {
	return l < len(p.moe) && p.moe[l] && l < len(p.mask) && p.mask.Count(l) > 0
}

// Mask returns MoE layer l's device experts (true: on the device), nil
// when it has none.
func (p *Plan) Mask(l int) []bool {
	if !p.device(l) {
		return nil
	}
	return p.mask[l]
}

// Share returns this rank's share of MoE layer l's device experts
// (RankShare), nil when the layer has none.
func (p *Plan) Share(l int) []bool {
	if !p.device(l) {
		return nil
	}
	return RankShare(p.mask[l], p.lay.Rank, p.lay.Size)
}

// layerwise reports whether every rank computes its share of every
// routed expert in a step of n rows: a layerwise prefill step
// (UseLayerwise) under tensor parallelism in the hybrid step.
func (p *Plan) layerwise(n int) bool {
	return p.lw > 0 && UseLayerwise(p.lw, n, p.rb.DecodeGraphStep())
}

// Reduced reports whether the ranks' outputs of MoE layer l in the step
// being queued, of n rows, are partial sums to add over the ranks
// (several ranks, and device experts in the layer or a layerwise step:
// each rank computed its share) rather than rank 0's whole output, which
// the others receive. Every rank answers the same.
func (p *Plan) Reduced(l, n int) bool {
	return p.lay.Size > 1 && l < len(p.moe) && p.moe[l] && (p.device(l) || p.layerwise(n))
}

// Runs reports whether this rank computes routed experts of MoE layer l
// in the step being queued, of n rows: rank 0 always, another rank when
// the layer is Reduced (its share, possibly none: its output is then
// zeros).
func (p *Plan) Runs(l, n int) bool { return p.lay.Rank == 0 || p.Reduced(l, n) }

// OnRank reports whether this rank holds routed experts of MoE layer l,
// to compute in some step (Runs): rank 0 always; another rank when the
// layer has device experts, or in the hybrid step with layerwise prefill
// (its share of every expert, uploaded in layerwise steps).
func (p *Plan) OnRank(l int) bool {
	return p.lay.Rank == 0 || p.lay.Size > 1 && l < len(p.moe) && p.moe[l] && (p.device(l) || p.lw > 0)
}

// Computes reports whether this rank computes routed experts of any
// layer (the model then makes its Experts).
func (p *Plan) Computes() bool {
	for l, moe := range p.moe {
		if moe && p.OnRank(l) {
			return true
		}
	}
	return p.lay.Rank == 0
}

// CountPicks adds to counts (one per expert) the expert picks in ids;
// ids outside [0, len(counts)) (masked picks) are not counted.
func CountPicks(counts []int, ids []int32) {
	for _, id := range ids {
		if id >= 0 && int(id) < len(counts) {
			counts[id]++
		}
	}
}

// HottestExperts returns the n experts with the most picks in counts,
// ties to the lower id (torch.topk over SGLang-KT's index_add counts, as
// select_top_experts_from_batch), in increasing id order. n is clamped to
// [0, len(counts)].
func HottestExperts(counts []int, n int) []int {
	n = min(max(n, 0), len(counts))
	order := make([]int, len(counts))
	for e := range order {
		order[e] = e
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(counts[b], counts[a]) })
	top := order[:n]
	slices.Sort(top)
	return top
}

// SlotCopy is one expert to copy into a GPU expert slot.
type SlotCopy struct {
	Slot, Expert int
}

// AssignSlots places the experts of want (distinct ids) into GPU expert
// slots whose current experts are slots (slot → expert id, −1 empty;
// len(want) ≤ len(slots)): an expert already in a slot stays there, the
// others take the slots freed, lowest slot first. It returns the new
// slot → expert table and the copies to make.
func AssignSlots(slots, want []int) ([]int, []SlotCopy, error) {
	if len(want) > len(slots) {
		return nil, nil, fmt.Errorf("%d experts for %d GPU expert slots", len(want), len(slots))
	}
	in := make(map[int]bool, len(want))
	for _, e := range want {
		if e < 0 || in[e] {
			return nil, nil, fmt.Errorf("expert %d listed twice or negative in %v", e, want)
		}
		in[e] = true
	}
	next := slices.Clone(slots)
	placed := make(map[int]bool, len(want))
	var free []int
	for s, e := range next {
		if e >= 0 && in[e] && !placed[e] {
			placed[e] = true
			continue
		}
		next[s] = -1
		free = append(free, s)
	}
	var copies []SlotCopy
	for _, e := range want {
		if placed[e] {
			continue
		}
		s := free[0]
		free = free[1:]
		next[s] = e
		copies = append(copies, SlotCopy{Slot: s, Expert: e})
	}
	return next, copies, nil
}

// MaskFromSlots returns the GPU expert mask (true: on the GPU) of E
// experts for the slot → expert table slots, into mask (len E).
func MaskFromSlots(mask []bool, slots []int) {
	clear(mask)
	for _, e := range slots {
		if e >= 0 && e < len(mask) {
			mask[e] = true
		}
	}
}

// RebindSlots points w's GPU experts at new places after a dynamic
// update: gpu (len E) holds the layer's new GPU experts over every rank
// and is copied into w.GPU (updated in place: the CPU engine's skip mask
// is set from it); this rank's slot i (tensors slotT[i]: gate, up, down)
// now holds expert slots[i] (−1: none). w.OnGPU (what the GPU MoE op
// reads: this rank's slots, nil for every other expert) and w.Experts
// follow as Load binds them: the slot tensors for this rank's GPU
// experts, host stand-ins for the CPU's where host (the rank of the CPU
// expert engine), nil elsewhere.
func RebindSlots(w *Weights, slotT [][3]backend.Tensor, slots []int, gpu []bool, host bool) {
	copy(w.GPU, gpu)
	for e := range w.Gate {
		w.OnGPU.Gate[e], w.OnGPU.Up[e], w.OnGPU.Down[e] = nil, nil, nil
		w.Gate[e], w.Up[e], w.Down[e] = nil, nil, nil
		if !w.GPU[e] && host {
			w.Gate[e], w.Up[e], w.Down[e] = hostTensor{w.HostGate[e]}, hostTensor{w.HostUp[e]}, hostTensor{w.HostDown[e]}
		}
	}
	for i, e := range slots {
		if e < 0 {
			continue
		}
		t := slotT[i]
		w.OnGPU.Gate[e], w.OnGPU.Up[e], w.OnGPU.Down[e] = t[0], t[1], t[2]
		w.Gate[e], w.Up[e], w.Down[e] = t[0], t[1], t[2]
	}
}

// SlotsFromMask returns the slot → expert table of a placement mask: slot
// i holds the i-th expert on the GPU, in id order (how Load uploads them).
func SlotsFromMask(mask []bool) []int {
	var slots []int
	for e, on := range mask {
		if on {
			slots = append(slots, e)
		}
	}
	return slots
}
