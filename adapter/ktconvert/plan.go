package ktconvert

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/adapter/peft"
	"github.com/ktserve/kt/safetensors"
)

// outTensor is one tensor of an output adapter and where its bytes come
// from: a byte range of an input tensor (a whole non-expert tensor, or one
// expert's slice of a fused [E, ., .] tensor).
type outTensor struct {
	spec   safetensors.Spec
	file   *safetensors.File
	srcKey string // input tensor name
	start  int64  // byte offset within the input tensor's data
	size   int64
}

// plan is everything the converter learned from the input headers; no
// tensor data has been read when it is complete.
type plan struct {
	nonexpert []outTensor // cleaned non-expert PEFT tensors
	expert    []outTensor // per-expert tensors cut from the fused file

	nonexpertTargets map[string]bool
	expertTargets    map[string]bool

	rank, experts, hidden, inter int64
	layers                       []int          // layers of the fused file, ascending
	nonexpertLayers              map[int]string // layer index seen in a non-expert key -> that key
	example                      map[string]string
}

// addNonexpert plans the tensors of adapter_model.safetensors: keys cleaned
// as PEFT keys, target modules inferred, duplicates refused.
func (p *plan) addNonexpert(f *safetensors.File, seen map[string]string) error {
	name := filepath.Base(f.Path())
	for _, ti := range f.Tensors() {
		key := peft.CleanKey(ti.Name)
		if prev, dup := seen[key]; dup {
			return fmt.Errorf("%s: duplicate output tensor key %q (from %s and %s %q)", f.Path(), key, prev, name, ti.Name)
		}
		seen[key] = name + " " + strconv.Quote(ti.Name)
		if m, ok := peft.TargetModule(key); ok {
			p.nonexpertTargets[m] = true
		}
		if l, ok := layerIndex(key); ok {
			if _, have := p.nonexpertLayers[l]; !have {
				p.nonexpertLayers[l] = ti.Name
			}
		}
		p.nonexpert = append(p.nonexpert, outTensor{
			spec: safetensors.Spec{Name: key, DType: ti.DType, Shape: ti.Shape},
			file: f, srcKey: ti.Name, start: 0, size: ti.Size,
		})
	}
	return nil
}

// layerIndex finds "layers.{N}." in a key.
func layerIndex(key string) (int, bool) {
	_, rest, ok := strings.Cut(key, "layers.")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil && n >= 0
}

// firstOf records, for each distinct value of a dimension, the first tensor
// that had it, to name tensors when values disagree.
type firstOf struct {
	vals map[int64]string
}

func (d *firstOf) add(v int64, tensor string) {
	if d.vals == nil {
		d.vals = map[int64]string{}
	}
	if _, ok := d.vals[v]; !ok {
		d.vals[v] = tensor
	}
}

// single returns the one value, or an error listing the disagreeing values
// and a tensor that has each.
func (d *firstOf) single(what, file string) (int64, error) {
	if len(d.vals) == 1 {
		for v := range d.vals {
			return v, nil
		}
	}
	vs := make([]int64, 0, len(d.vals))
	for v := range d.vals {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%d (%s)", v, d.vals[v])
	}
	return 0, fmt.Errorf("%s: inconsistent %s: %s", file, what, strings.Join(parts, ", "))
}

// addFused plans the per-expert tensors cut from fused_expert_lora.safetensors,
// refusing unexpected keys, tensors that are not 3-D, inconsistent expert
// counts, ranks or feature sizes, and layers lacking some of the six tensors.
func (p *plan) addFused(f *safetensors.File, seen map[string]string) error {
	path := f.Path()
	infos := append([]safetensors.TensorInfo(nil), f.Tensors()...)
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	var experts, ranks, hidden, inter firstOf
	kinds := map[int]map[ktlora.Kind]bool{}
	for _, ti := range infos {
		layer, kind, err := ktlora.ParseFusedKey(ti.Name)
		if err != nil {
			return fmt.Errorf("%s: unexpected key %w", path, err)
		}
		if len(ti.Shape) != 3 {
			return fmt.Errorf("%s: tensor %q must be 3-D [E, ...], got shape %v", path, ti.Name, ti.Shape)
		}
		experts.add(ti.Shape[0], ti.Name)
		ranks.add(ti.Shape[kind.RankDim()], ti.Name)
		if kind.IsHidden() {
			hidden.add(ti.Shape[kind.FeatureDim()], ti.Name)
		} else {
			inter.add(ti.Shape[kind.FeatureDim()], ti.Name)
		}
		if kinds[layer] == nil {
			kinds[layer] = map[ktlora.Kind]bool{}
		}
		kinds[layer][kind] = true
		p.expertTargets[kind.Proj.String()] = true

		e := ti.Shape[0]
		per := int64(0)
		if e > 0 {
			per = ti.Size / e
		}
		shape := []int64{ti.Shape[1], ti.Shape[2]}
		for x := int64(0); x < e; x++ {
			key := ktlora.ExpertKey(layer, int(x), kind)
			if prev, dup := seen[key]; dup {
				return fmt.Errorf("%s: duplicate output tensor key %q (from %s and expert %d of %q)", path, key, prev, x, ti.Name)
			}
			seen[key] = fmt.Sprintf("expert %d of %s %q", x, ktlora.FusedFile, ti.Name)
			p.expert = append(p.expert, outTensor{
				spec: safetensors.Spec{Name: key, DType: ti.DType, Shape: shape},
				file: f, srcKey: ti.Name, start: x * per, size: per,
			})
		}
	}
	if len(p.expert) == 0 {
		return fmt.Errorf("%s: no tensors found", path)
	}
	var err error
	if p.experts, err = experts.single("expert counts", path); err != nil {
		return err
	}
	if p.rank, err = ranks.single("LoRA ranks", path); err != nil {
		return err
	}
	if p.hidden, err = hidden.single("hidden sizes", path); err != nil {
		return err
	}
	if p.inter, err = inter.single("intermediate sizes", path); err != nil {
		return err
	}
	p.example = map[string]string{
		"experts": experts.vals[p.experts], "rank": ranks.vals[p.rank],
		"hidden": hidden.vals[p.hidden], "inter": inter.vals[p.inter],
	}
	for l := range kinds {
		p.layers = append(p.layers, l)
	}
	sort.Ints(p.layers)
	for _, l := range p.layers {
		var missing []string
		for _, k := range ktlora.Kinds {
			if !kinds[l][k] {
				missing = append(missing, ktlora.FusedKey(l, k))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%s: layer %d is incomplete: missing %s", path, l, strings.Join(missing, ", "))
		}
	}
	return nil
}

// checkNonexpertRanks refuses non-expert LoRA tensors whose rank differs
// from the expert rank: the written adapter_config.json has a single r, and
// runtime scaling alpha/r would be wrong for one of the two.
func (p *plan) checkNonexpertRanks(path string) error {
	for _, t := range p.nonexpert {
		if r, ok := peft.TensorRank(t.spec.Name, t.spec.Shape); ok && r != p.rank {
			return fmt.Errorf("%s: tensor %q has LoRA rank %d (shape %v) but the expert LoRA rank is %d (%s); the merged adapter_config.json can hold only one r",
				path, t.srcKey, r, t.spec.Shape, p.rank, p.example["rank"])
		}
	}
	return nil
}
