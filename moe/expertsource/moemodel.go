package expertsource

import (
	"fmt"
	"sort"

	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
)

// MoEModel is what kt can tell of any MoE checkpoint's routed experts,
// whatever its architecture: the shape config.json states and the layers
// the checkpoint holds them in.
type MoEModel struct {
	Shape   modelconfig.MoEShape
	Tensors ExpertTensors
	// Layers are the decoder layers holding routed experts; Beyond those
	// past num_hidden_layers (DecoderLayers).
	Layers, Beyond []int
}

// OpenMoEModel reads dir's config.json and finds its routed-expert tensors
// (FindExpertTensors), checking the expert count against the config.
func OpenMoEModel(dir string) (MoEModel, error) {
	shape, err := modelconfig.LoadMoEShape(dir)
	if err != nil {
		return MoEModel{}, err
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return MoEModel{}, err
	}
	defer ck.Close()
	return FindMoEModel(dir, shape, ck.Names(), func(n string) []int64 {
		ti, _ := ck.Info(n)
		return ti.Shape
	})
}

// FindMoEModel is OpenMoEModel over a checkpoint's tensor names and dims
// (dir names it in errors).
func FindMoEModel(dir string, shape modelconfig.MoEShape, names []string, dims func(string) []int64) (MoEModel, error) {
	et, err := FindExpertTensors(names, dims)
	if err != nil {
		return MoEModel{}, fmt.Errorf("%s: %w", dir, err)
	}
	if et.Experts != shape.Experts {
		return MoEModel{}, fmt.Errorf("%s: config.json states %d routed experts per layer, the checkpoint holds %d (under %q)", dir, shape.Experts, et.Experts, et.Prefix)
	}
	m := MoEModel{Shape: shape, Tensors: et}
	m.Layers, m.Beyond = DecoderLayers(shape, et.Layers)
	if len(m.Layers) == 0 {
		return MoEModel{}, fmt.Errorf("%s: no experts in the %d decoder layers", dir, shape.Layers)
	}
	return m, nil
}

// DecoderLayers splits the layers holding routed experts into the
// decoder's (below num_hidden_layers when the config states it) and those
// past it: DeepSeek-V3 keeps its multi-token prediction layer, experts
// included, as model.layers.{num_hidden_layers}.
func DecoderLayers(shape modelconfig.MoEShape, layers []int) (decoder, beyond []int) {
	if shape.Layers <= 0 {
		return layers, nil
	}
	i := sort.SearchInts(layers, shape.Layers)
	return layers[:i], layers[i:]
}

// TokenBytes is the routed-expert bytes one decoded token reads at batch 1
// with every expert in method m: top-k experts of every MoE layer.
func (mm MoEModel) TokenBytes(m cpuexperts.Method) int64 {
	return TokenBytes(m, mm.Shape.Hidden, mm.Shape.Intermediate, mm.Shape.TopK, len(mm.Layers))
}

// TokenBytes is the routed-expert bytes one decoded token reads at batch 1
// from layers MoE layers of top-k experts of hidden x intermediate in
// method m.
func TokenBytes(m cpuexperts.Method, hidden, intermediate, topK, layers int) int64 {
	return m.ExpertBytesEstimate(hidden, intermediate) * int64(topK) * int64(layers)
}
