package hybrid

import (
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
//     decode graphs captured before see the new placement;
//   - with tensor parallelism every rank takes part: each holds, uploads
//     and computes its share of every layer's experts (RankShare over all
//     of them; rank 0's CPU expert engine is idle in such a layer) and the
//     all-reduce after the MoE layer sums the shares (Plan.Reduced); the
//     dynamic update picks the same new GPU experts on every rank (the
//     routing is the same) and each rank refills its slots with its
//     RankShare of them, from its shadow buffer or, for an expert another
//     rank uploaded, from host memory.

// LayerwiseStats counts what layerwise prefill and the dynamic expert
// update did.
type LayerwiseStats struct {
	Steps       int           // layerwise forward passes completed
	Layers      int           // MoE layers computed layerwise
	Uploads     int           // layer uploads into a shadow buffer
	UploadBytes int64         // bytes uploaded
	UploadTime  time.Duration // host time filling the staging slots and queueing the copies
	Updates     int           // dynamic updates that changed a layer's GPU experts
	Moved       int           // experts copied into this rank's GPU expert slots
	// Fetched counts the moved experts copied from host memory rather
	// than from the shadow layer buffer: with tensor parallelism a rank's
	// new share of the GPU experts may hold experts another rank uploaded
	Fetched int
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
		if s.Fetched > 0 {
			out += fmt.Sprintf(" (%d from host memory)", s.Fetched)
		}
	}
	return out
}

// UseLayerwise reports whether a forward pass of tokens rows runs its
// routed experts layer by layer on the GPU: threshold > 0, tokens ≥
// threshold, and not a padded decode step of the graph path (graphStep).
func UseLayerwise(threshold, tokens int, graphStep bool) bool {
	return threshold > 0 && tokens >= threshold && !graphStep
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
