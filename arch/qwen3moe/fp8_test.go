package qwen3moe

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// writeFP8Pair writes two copies of fixture src: fp8 with every *_proj
// weight block-scaled FP8 (blocks block, weight_scale_inv, config's
// quantization_config), and deq with those weights dequantised to F32
// (the values the FP8 contract gives them).
func writeFP8Pair(t *testing.T, src string, block [2]int) (fp8Dir, deqDir string) {
	t.Helper()
	return writeFP8PairFrom(t, fixtureDir(src), block)
}

// writeFP8PairFrom is writeFP8Pair for the checkpoint in directory srcDir.
func writeFP8PairFrom(t *testing.T, srcDir string, block [2]int) (fp8Dir, deqDir string) {
	t.Helper()
	src := srcDir
	ck, err := safetensors.OpenDir(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	fp8Dir, deqDir = filepath.Join(t.TempDir(), "fp8"), filepath.Join(t.TempDir(), "deq")
	type entry struct {
		spec safetensors.Spec
		data []byte
	}
	var fp8s, deqs []entry
	nq := 0
	for _, name := range ck.Names() {
		tt, err := ck.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		sp := safetensors.Spec{Name: name, DType: tt.DType, Shape: tt.Shape}
		if !strings.HasSuffix(name, "_proj.weight") || len(tt.Shape) != 2 {
			fp8s = append(fp8s, entry{sp, tt.Data})
			deqs = append(deqs, entry{sp, tt.Data})
			continue
		}
		w, err := tt.ToF32()
		if err != nil {
			t.Fatal(err)
		}
		o, k := int(tt.Shape[0]), int(tt.Shape[1])
		h, deq, err := backend.QuantizeFP8(name, w, o, k, block)
		if err != nil {
			t.Fatal(err)
		}
		nq++
		fp8s = append(fp8s, entry{safetensors.Spec{Name: name, DType: tensor.F8E4M3, Shape: tt.Shape}, h.Data},
			entry{safetensors.Spec{Name: name + "_scale_inv", DType: tensor.F32, Shape: []int64{int64(h.Scale.Shape[0]), int64(h.Scale.Shape[1])}}, h.Scale.Data})
		db := make([]byte, 4*len(deq))
		for i, v := range deq {
			b := math.Float32bits(v)
			db[4*i], db[4*i+1], db[4*i+2], db[4*i+3] = byte(b), byte(b>>8), byte(b>>16), byte(b>>24)
		}
		deqs = append(deqs, entry{safetensors.Spec{Name: name, DType: tensor.F32, Shape: tt.Shape}, db})
	}
	if nq == 0 {
		t.Fatalf("%s: no projection weights", src)
	}
	cfgData, err := os.ReadFile(filepath.Join(srcDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		dir string
		es  []entry
		fp8 bool
	}{{fp8Dir, fp8s, true}, {deqDir, deqs, false}} {
		if err := os.MkdirAll(d.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		specs := make([]safetensors.Spec, len(d.es))
		for i, e := range d.es {
			specs[i] = e.spec
		}
		w, err := safetensors.Create(filepath.Join(d.dir, "model.safetensors"), specs, map[string]string{"format": "pt"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range d.es {
			if _, err := w.Write(e.data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(cfgData, &cfg); err != nil {
			t.Fatal(err)
		}
		if d.fp8 {
			cfg["quantization_config"] = map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": block[:]}
		}
		out, _ := json.Marshal(cfg)
		if err := os.WriteFile(filepath.Join(d.dir, "config.json"), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return fp8Dir, deqDir
}

// TestFP8CheckpointMatchesDequantised loads FP8 copies of the fixtures
// (per-expert keys; 32x32 and 128x128 blocks over hidden 64 and experts of
// 32: partial blocks) and checks the logits of a prompt against the same
// model with the weights dequantised to F32: the FP8 MatMul (and the MoE
// op over FP8 experts) equals dequantise-then-f32-matmul within float32
// rounding (1e-4 in logits), for the SIMD and portable kernels.
func TestFP8CheckpointMatchesDequantised(t *testing.T) {
	for _, block := range [][2]int{{32, 32}, {128, 128}} {
		fp8Dir, deqDir := writeFP8Pair(t, "qwen3moe-a", block)
		for _, simd := range []bool{true, false} {
			var logits [2][][]float32
			for i, dir := range []string{fp8Dir, deqDir} {
				be := cpu.New(cpu.Options{Threads: 2, NoSIMD: !simd})
				r, err := Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 128, MaxBatchTokens: 64, PageSize: 16, Backend: be, Experts: "backend"})
				if err != nil {
					be.Close()
					t.Fatal(err)
				}
				prompt := modeltest.ReadRef(t, "qwen3moe-a")[1].PromptIDs[:40]
				logits[i] = modeltest.Forward(t, testRunner{r}, 0, prompt, true)
				r.Close()
				be.Close()
			}
			var worst float64
			for i := range logits[0] {
				for j := range logits[0][i] {
					worst = math.Max(worst, math.Abs(float64(logits[0][i][j]-logits[1][i][j])))
				}
			}
			t.Logf("block %v simd %v: max |logit diff| %.3g", block, simd, worst)
			if worst > 1e-4 {
				t.Errorf("block %v simd %v: FP8 checkpoint logits differ from the dequantised one by %g", block, simd, worst)
			}
		}
	}
}
