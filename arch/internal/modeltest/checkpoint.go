package modeltest

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// tensorEntry is one tensor of a checkpoint a test writes.
type tensorEntry struct {
	spec safetensors.Spec
	data []byte
}

// writeCheckpoint writes es as dir/model.safetensors beside srcDir's
// config.json with quant (when not nil) as its quantization_config.
func writeCheckpoint(t *testing.T, dir, srcDir string, es []tensorEntry, quant map[string]any) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	specs := make([]safetensors.Spec, len(es))
	for i, e := range es {
		specs[i] = e.spec
	}
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if _, err := w.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(srcDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if quant != nil {
		cfg["quantization_config"] = quant
	}
	out, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeQuantizedPair writes two copies of the checkpoint in srcDir into
// fresh directories: quantized, in which every 2-D weight selected picks is
// replaced by the tensors quantize returns for it and quant is config.json's
// quantization_config, and deq, in which each such weight holds the f32
// values quantize says those tensors stand for. The test fails when picks
// selects no weight.
func writeQuantizedPair(t *testing.T, srcDir string, picks func(name string) bool,
	quantize func(name string, w []float32, out, in int) (q []tensorEntry, deq []float32), quant map[string]any) (qDir, deqDir string) {
	t.Helper()
	ck, err := safetensors.OpenDir(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var qs, deqs []tensorEntry
	picked := 0
	for _, name := range ck.Names() {
		tt, err := ck.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		sp := safetensors.Spec{Name: name, DType: tt.DType, Shape: tt.Shape}
		if !picks(name) || len(tt.Shape) != 2 {
			qs, deqs = append(qs, tensorEntry{sp, tt.Data}), append(deqs, tensorEntry{sp, tt.Data})
			continue
		}
		w, err := tt.ToF32()
		if err != nil {
			t.Fatal(err)
		}
		picked++
		q, deq := quantize(name, w, int(tt.Shape[0]), int(tt.Shape[1]))
		db := make([]byte, 0, 4*len(deq))
		for _, v := range deq {
			db = binary.LittleEndian.AppendUint32(db, math.Float32bits(v))
		}
		qs = append(qs, q...)
		deqs = append(deqs, tensorEntry{safetensors.Spec{Name: name, DType: tensor.F32, Shape: tt.Shape}, db})
	}
	if picked == 0 {
		t.Fatalf("%s: no weight to quantize", srcDir)
	}
	qDir, deqDir = filepath.Join(t.TempDir(), "quantized"), filepath.Join(t.TempDir(), "deq")
	writeCheckpoint(t, qDir, srcDir, qs, quant)
	writeCheckpoint(t, deqDir, srcDir, deqs, nil)
	return qDir, deqDir
}
