package hybrid

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// Layerwise GPU prefill (--kt-gpu-prefill-token-threshold, SGLang-KT's
// kt_ep_wrapper.py with its SharedFullContext) and dynamic expert update
// (--kt-enable-dynamic-expert-update):
//
//   - a forward pass of at least the threshold's tokens (threshold > 0)
//     runs every MoE layer's routed experts on the GPU: the layer's
//     expert weights, from host memory in the format the GPU MoE op reads
//     (bf16/f32/f16, or block-scaled FP8 as the checkpoint stores them),
//     are copied into one shared device "shadow" layer buffer, then the
//     backend's MoE op computes the layer; below the threshold the hybrid
//     step runs as before;
//   - padded decode steps of the CUDA graph path never take it (their ops
//     must be the same every time a bucket runs);
//   - with dynamic update, after a layer's layerwise compute its GPU
//     expert slots (as many as the placement gave the layer) are refilled
//     from the shadow buffer, device to device, with the step's most picked
//     experts of that layer (HottestExperts), and the CPU engine's skip
//     mask and the GPU MoE op's expert table are rewritten in place, so
//     decode graphs captured before see the new placement.

// LayerwiseStats counts what layerwise prefill and the dynamic expert
// update did.
type LayerwiseStats struct {
	Steps       int           // layerwise forward passes completed
	Layers      int           // MoE layers computed layerwise
	Uploads     int           // layer uploads into a shadow buffer
	UploadBytes int64         // bytes uploaded
	UploadTime  time.Duration // host time filling the staging slots and queueing the copies
	Updates     int           // dynamic updates that changed a layer's GPU experts
	Moved       int           // experts copied into GPU expert slots
}

// String summarises s for a log line ("" when nothing ran layerwise).
func (s LayerwiseStats) String() string {
	if s.Layers == 0 {
		return ""
	}
	out := fmt.Sprintf("layerwise prefill: %d passes, %d MoE layers on the GPU, %d layer uploads (%.1f MiB, %.2f ms host time each)",
		s.Steps, s.Layers, s.Uploads, float64(s.UploadBytes)/(1<<20), float64(s.UploadTime.Microseconds())/1000/float64(max(s.Uploads, 1)))
	if s.Updates > 0 {
		out += fmt.Sprintf("; dynamic expert update: %d layer updates, %d experts moved to the GPU", s.Updates, s.Moved)
	}
	return out
}

// UseLayerwise reports whether a forward pass of tokens rows runs its
// routed experts layer by layer on the GPU: threshold > 0, tokens ≥
// threshold, and not a padded decode step of the graph path (graphStep).
func UseLayerwise(threshold, tokens int, graphStep bool) bool {
	return threshold > 0 && tokens >= threshold && !graphStep
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
// update: slot i (tensors slotT[i]: gate, up, down) now holds expert
// slots[i] (−1: none). w.GPU (updated in place: the CPU engine's skip
// mask is set from it), w.OnGPU (what the GPU MoE op reads; nil for the
// CPU's experts) and w.Experts (device tensors for GPU experts, host
// stand-ins for the others, as Load binds them) follow.
func RebindSlots(w *Weights, slotT [][3]backend.Tensor, slots []int) {
	MaskFromSlots(w.GPU, slots)
	for e := range w.Gate {
		w.OnGPU.Gate[e], w.OnGPU.Up[e], w.OnGPU.Down[e] = nil, nil, nil
		if !w.GPU[e] {
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

// CheckLayerwiseSource checks that every routed expert of layers (nil for
// a dense layer) is stored in a form the GPU MoE op reads from host
// memory — F32, BF16, F16, or block-scaled FP8 with its scales — and that
// all of them have one layer's form (they share the shadow buffer). The
// error names the tensor, what would work, and how to turn layerwise
// prefill off. method is the CPU expert method, for the message.
func CheckLayerwiseSource(layers []*Weights, method string) error {
	var first *Weights
	for l, w := range layers {
		if w == nil {
			continue
		}
		if first == nil {
			first = w
		}
		if len(w.HostGate) != len(first.HostGate) {
			return fmt.Errorf("--kt-gpu-prefill-token-threshold: layer %d has %d experts, an earlier MoE layer %d; layerwise prefill shares one layer buffer (set --kt-gpu-prefill-token-threshold 0)", l, len(w.HostGate), len(first.HostGate))
		}
		for e := range w.HostGate {
			for j, h := range []backend.Host{w.HostGate[e], w.HostUp[e], w.HostDown[e]} {
				f := [3]backend.Host{first.HostGate[e], first.HostUp[e], first.HostDown[e]}[j]
				if err := layerwiseForm(h, f); err != nil {
					return fmt.Errorf("--kt-gpu-prefill-token-threshold: layer %d expert %d: %w; layerwise prefill streams the checkpoint's experts to the GPU MoE op, which reads BF16, F16, F32 or block-scaled FP8 (the CPU expert method %s may stay): serve such a checkpoint with --model-path, or set --kt-gpu-prefill-token-threshold 0", l, e, err, method)
				}
			}
		}
	}
	return nil
}

// layerwiseForm checks one expert matrix h against the GPU MoE op's forms
// and against f, the same matrix of the first MoE layer.
func layerwiseForm(h, f backend.Host) error {
	switch {
	case h.FP8():
	case h.DType == tensor.F32, h.DType == tensor.BF16, h.DType == tensor.F16:
	default:
		return fmt.Errorf("%s is %s", h.Name, h.DType)
	}
	if h.DType != f.DType || !slices.Equal(h.Shape, f.Shape) || h.FP8() != f.FP8() || len(h.Data) != len(f.Data) {
		return fmt.Errorf("%s is %s %v, the first MoE layer's %s is %s %v", h.Name, h.DType, h.Shape, f.Name, f.DType, f.Shape)
	}
	if h.FP8() && (h.Block != f.Block || len(h.Scale.Data) != len(f.Scale.Data) || h.Scale.DType != f.Scale.DType) {
		return fmt.Errorf("%s has FP8 block %v, the first MoE layer's %v", h.Name, h.Block, f.Block)
	}
	return nil
}
