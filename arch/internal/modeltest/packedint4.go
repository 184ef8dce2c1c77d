package modeltest

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// WritePackedInt4Pair writes two copies of the checkpoint in srcDir:
// packed, with every routed expert's 2-D *_proj weight in compressed-tensors
// pack-quantized INT4 (symmetric, a bf16 scale per group of group input
// columns; weight_packed, weight_scale, weight_shape; config's
// quantization_config as Kimi-K2-Thinking's), and deq with those weights
// as the f32 values the packed form stands for.
func WritePackedInt4Pair(t *testing.T, srcDir string, group int) (packedDir, deqDir string) {
	t.Helper()
	picks := func(name string) bool {
		return strings.Contains(name, ".mlp.experts.") && strings.HasSuffix(name, "_proj.weight")
	}
	return writeQuantizedPair(t, srcDir, picks, func(name string, w []float32, out, in int) ([]tensorEntry, []float32) {
		groups, words := (in+group-1)/group, (in+7)/8
		pk := make([]byte, 4*out*words)
		sc := make([]byte, 2*out*groups)
		deq := make([]float32, out*in)
		for r := range out {
			for g := range groups {
				lo, hi := g*group, min((g+1)*group, in)
				amax := 0.0
				for c := lo; c < hi; c++ {
					amax = math.Max(amax, math.Abs(float64(w[r*in+c])))
				}
				s := tensor.BF16ToF32(tensor.F32ToBF16(float32(max(amax/7, 1e-8))))
				binary.LittleEndian.PutUint16(sc[2*(r*groups+g):], tensor.F32ToBF16(s))
				for c := lo; c < hi; c++ {
					q := int(math.Max(-8, math.Min(7, math.Round(float64(w[r*in+c]/s)))))
					i := 4 * (r*words + c/8)
					binary.LittleEndian.PutUint32(pk[i:], binary.LittleEndian.Uint32(pk[i:])|uint32(q+8)<<(4*(c%8)))
					deq[r*in+c] = float32(q) * s
				}
			}
		}
		base := strings.TrimSuffix(name, ".weight")
		shape := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(out)), uint64(in))
		return []tensorEntry{
			{safetensors.Spec{Name: base + ".weight_packed", DType: tensor.I32, Shape: []int64{int64(out), int64(words)}}, pk},
			{safetensors.Spec{Name: base + ".weight_scale", DType: tensor.BF16, Shape: []int64{int64(out), int64(groups)}}, sc},
			{safetensors.Spec{Name: base + ".weight_shape", DType: tensor.I64, Shape: []int64{2}}, shape}}, deq
	}, map[string]any{
		"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
		"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"}, "input_activations": nil,
			"weights": map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group",
				"group_size": group, "dynamic": false, "observer": "minmax"}}},
		"ignore": []string{"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}})
}
