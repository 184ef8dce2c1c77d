//go:build linux && amd64 && cgo

package qwen3next

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/adapter/ktlora"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/lora"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/models"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// writeSynthAdapter writes a merged KT adapter (rank 4, alpha 8) for the
// engine-sized synthetic model: q_proj and o_proj on the full-attention
// layers, in_proj_qkv and out_proj on the linear-attention ones, the shared
// expert's three projections and every routed expert's, random bf16.
func writeSynthAdapter(t *testing.T, s SynthShape) string {
	t.Helper()
	const r = 4
	rng := rand.New(rand.NewPCG(3, 5))
	var ts []safetensors.Tensor
	add := func(name string, rows, cols int) {
		data := make([]byte, 2*rows*cols)
		for i := 0; i < rows*cols; i++ {
			binary.LittleEndian.PutUint16(data[2*i:], tensor.F32ToBF16(float32(rng.NormFloat64()*0.1)))
		}
		ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: tensor.BF16, Shape: []int64{int64(rows), int64(cols)}}, Data: data})
	}
	pair := func(l int, module string, out, in int) {
		p := fmt.Sprintf("base_model.model.model.layers.%d.%s.", l, module)
		add(p+"lora_A.weight", r, in)
		add(p+"lora_B.weight", out, r)
	}
	H := s.Hidden
	for l := 0; l < s.Layers; l++ {
		if (l+1)%4 == 0 {
			pair(l, "self_attn.q_proj", 2*s.Heads*s.HeadDim, H)
			pair(l, "self_attn.o_proj", H, s.Heads*s.HeadDim)
		} else {
			kd, vd := s.LinKHeads*s.LinKDim, s.LinVHeads*s.LinVDim
			pair(l, "linear_attn.in_proj_qkv", 2*kd+vd, H)
			pair(l, "linear_attn.out_proj", H, vd)
		}
		pair(l, "mlp.shared_expert.gate_proj", s.SharedInter, H)
		pair(l, "mlp.shared_expert.up_proj", s.SharedInter, H)
		pair(l, "mlp.shared_expert.down_proj", H, s.SharedInter)
		for e := 0; e < s.Experts; e++ {
			for _, k := range ktlora.Kinds {
				rows, cols := r, H
				switch {
				case k.Proj != ktlora.Down && k.Factor == ktlora.B:
					rows, cols = s.MoEInter, r
				case k.Proj == ktlora.Down && k.Factor == ktlora.A:
					rows, cols = r, s.MoEInter
				case k.Proj == ktlora.Down && k.Factor == ktlora.B:
					rows, cols = H, r
				}
				add(ktlora.ExpertKey(l, e, k), rows, cols)
			}
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "bias": "none"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runLoRASteps prefills two prompts in one step (sequence s with adapter
// ads[s]), then decodes 3 fixed tokens for both in mixed steps, and
// returns every logits row of each sequence.
func runLoRASteps(t *testing.T, r model.Runner, ads []int) [][][]float32 {
	t.Helper()
	prompts := [][]int32{make([]int32, 21), make([]int32, 9)}
	for s, p := range prompts {
		for i := range p {
			p[i] = int32((i*37 + s*101 + 5) % 300)
		}
	}
	out := make([][][]float32, len(prompts))
	pos := make([]int, len(prompts))
	var b model.Batch
	for s, p := range prompts {
		r.Free(s)
		if err := r.Reserve(s, len(p)+3); err != nil {
			t.Fatal(err)
		}
		b.Chunks = append(b.Chunks, model.Chunk{Slot: s, Tokens: p, AllLogits: true, Adapter: ads[s]})
		pos[s] = len(p)
	}
	for step := 0; step < 4; step++ {
		var lg model.Logits
		if err := r.Forward(&b, &lg); err != nil {
			t.Fatal(err)
		}
		for s := range prompts {
			for _, row := range lg.Rows[s] {
				out[s] = append(out[s], append([]float32(nil), row...))
			}
		}
		b.Chunks = b.Chunks[:0]
		for s := range prompts {
			b.Chunks = append(b.Chunks, model.Chunk{Slot: s, Pos: pos[s], Tokens: []int32{int32(17*step + s)}, Adapter: ads[s]})
			pos[s]++
		}
	}
	return out
}

// TestLoRAEngineAndHybrid runs the whole merged adapter on the synthetic
// model the CPU expert engine serves (hidden 128): the expert LoRA on the
// engine (kern_lora.c) and the non-expert LoRA per request, one sequence
// with the adapter and one without in every step (prefill and decode),
// against the same model with the CPU backend's MoE op (the reference);
// then, with a GPU, the hybrid step: everything but the routed experts on
// the GPU (the non-expert deltas through the CUDA LoRAAdd), the experts with
// their LoRA on the engine.
func TestLoRAEngineAndHybrid(t *testing.T) {
	dir, shape := writeEngineSynth(t, 9)
	adir := writeSynthAdapter(t, shape)
	load := func(be backend.Backend, experts string, noExpertLoRA ...bool) model.Runner {
		t.Helper()
		set, err := lora.Open(lora.Flags{LoRAPaths: []string{"syn=" + adir}})
		if err != nil {
			t.Fatal(err)
		}
		if len(noExpertLoRA) > 0 {
			set.Expert = nil
		}
		r, err := Load(dir, models.Options{MaxSeqs: 2, MaxTotalTokens: 128, MaxBatchTokens: 64, PageSize: 16, Threads: 2, Backend: be, Experts: experts, LoRA: set})
		if err != nil {
			t.Fatalf("%s: %v", experts, err)
		}
		t.Cleanup(func() { r.Close() })
		if p := r.ExpertPath(); experts != "backend" && !strings.Contains(p, "cpuexperts "+experts) {
			t.Fatalf("experts run on %q, want the CPU expert engine", p)
		}
		return r
	}
	cpuBE := cpu.New(cpu.Options{Threads: 2})
	t.Cleanup(func() { cpuBE.Close() })
	ref := load(cpuBE, "backend")
	eng := load(cpuBE, "BF16")
	cmp := func(name string, got, want [][][]float32, tol float64) {
		t.Helper()
		var worst float64
		for s := range want {
			worst = math.Max(worst, maxDiff(got[s], want[s]))
		}
		t.Logf("%s: max |logit diff| %.3g", name, worst)
		if worst > tol {
			t.Errorf("%s: max |logit diff| %.3g > %g", name, worst, tol)
		}
	}
	for _, ads := range [][]int{{1, 0}, {0, 1}} {
		want := runLoRASteps(t, ref, ads)
		if ads[0] == 1 {
			// the adapter must move the logits, or the test tells nothing
			base := runLoRASteps(t, ref, []int{0, 0})
			if d := maxDiff(base[0], want[0]); d < 0.05 {
				t.Fatalf("the non-expert adapter moves the logits by only %.3g", d)
			}
			noExp := runLoRASteps(t, load(cpuBE, "backend", true), []int{0, 0})
			if d := maxDiff(base[1], noExp[1]); d < 0.05 {
				t.Fatalf("the expert adapter moves the logits by only %.3g", d)
			}
		}
		cmp(fmt.Sprintf("engine BF16 adapters %v vs reference op", ads), runLoRASteps(t, eng, ads), want, 1e-3)
	}
	gpu, err := cuda.NewBackend(cuda.Options{MemFractionStatic: 0.2})
	if err != nil {
		t.Logf("no GPU, hybrid skipped: %v", err)
		return
	}
	t.Cleanup(func() { gpu.Close() })
	hyb := load(gpu, "BF16")
	for _, ads := range [][]int{{1, 0}, {0, 1}} {
		cmp(fmt.Sprintf("hybrid (GPU + engine) adapters %v vs CPU reference", ads), runLoRASteps(t, hyb, ads), runLoRASteps(t, ref, ads), loraGPUTol)
	}
}
