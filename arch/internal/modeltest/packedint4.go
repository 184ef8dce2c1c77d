package modeltest

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// WritePackedInt4Pair writes two copies of the checkpoint in srcDir:
// packed, with every routed expert's 2-D *_proj weight in compressed-tensors
// pack-quantized INT4 (cpuexperts.QuantizeInt4: symmetric, a bf16 scale
// per group of group input columns; weight_packed, weight_scale,
// weight_shape; config's quantization_config as Kimi-K2-Thinking's), and deq with those weights
// as the f32 values the packed form stands for.
func WritePackedInt4Pair(t *testing.T, srcDir string, group int) (packedDir, deqDir string) {
	t.Helper()
	picks := func(name string) bool {
		return strings.Contains(name, ".mlp.experts.") && strings.HasSuffix(name, "_proj.weight")
	}
	return writeQuantizedPair(t, srcDir, picks, func(name string, w []float32, out, in int) ([]tensorEntry, []float32) {
		m := cpuexperts.QuantizeInt4(w, out, in, group)
		groups, words := (in+group-1)/group, (in+7)/8
		sc := make([]byte, 0, 2*len(m.GroupScale))
		for _, s := range m.GroupScale {
			sc = binary.LittleEndian.AppendUint16(sc, tensor.F32ToBF16(s))
		}
		deq := make([]float32, out*in)
		m.DequantInt4(deq)
		base := strings.TrimSuffix(name, ".weight")
		shape := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(out)), uint64(in))
		return []tensorEntry{
			{safetensors.Spec{Name: base + ".weight_packed", DType: tensor.I32, Shape: []int64{int64(out), int64(words)}}, m.Data},
			{safetensors.Spec{Name: base + ".weight_scale", DType: tensor.BF16, Shape: []int64{int64(out), int64(groups)}}, sc},
			{safetensors.Spec{Name: base + ".weight_shape", DType: tensor.I64, Shape: []int64{2}}, shape}}, deq
	}, map[string]any{
		"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
		"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"}, "input_activations": nil,
			"weights": map[string]any{"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group",
				"group_size": group, "dynamic": false, "observer": "minmax"}}},
		"ignore": []string{"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"}})
}
