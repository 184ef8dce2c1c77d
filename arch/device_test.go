//go:build cgo

package arch_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	_ "github.com/ktserve/kt/arch/all"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/model"
)

// gpuUsable reports whether this machine has a GPU the CUDA backend opens.
func gpuUsable(t *testing.T) bool {
	t.Helper()
	_, err := cuda.DeviceCount()
	return err == nil
}

func TestOpenBackend(t *testing.T) {
	for _, dev := range []string{"", "cpu"} {
		be, note, err := arch.OpenBackend(arch.Options{Device: dev, Threads: 1})
		if err != nil {
			t.Fatalf("device %q: %v", dev, err)
		}
		if _, isCPU := be.(*cpu.Backend); !isCPU || !strings.Contains(note, "running on cpu") {
			t.Errorf("device %q: backend %s, note %q", dev, be.Name(), note)
		}
		be.Close()
	}
	if _, _, err := arch.OpenBackend(arch.Options{Device: "tpu"}); err == nil || !strings.Contains(err.Error(), "tpu") {
		t.Errorf("device tpu: error %v", err)
	}
	be, note, err := arch.OpenBackend(arch.Options{Device: "auto", Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	t.Logf("auto: %s", note)
	_, onGPU := be.(*cuda.Backend)
	if gpuUsable(t) != onGPU {
		t.Errorf("auto chose %s; GPU usable: %v", be.Name(), gpuUsable(t))
	}
	if !onGPU && !strings.Contains(note, "GPU not used (") {
		t.Errorf("auto on the CPU does not say why: %q", note)
	}
	if !gpuUsable(t) {
		_, _, err := arch.OpenBackend(arch.Options{Device: "cuda"})
		if !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), "--device cuda") {
			t.Errorf("device cuda without a GPU: error %v", err)
		}
	}
}

// TestLoadOnDevice loads a fixture with --device auto and runs a step; the
// runner closes the backend Load opened.
func TestLoadOnDevice(t *testing.T) {
	var notes []string
	r, err := arch.Load(filepath.Join("..", "testdata", "models", "qwen3moe-a"), arch.Options{
		Device: "auto", MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 16, Threads: 1,
		Notify: func(m string) { notes = append(notes, m) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "running on") {
		t.Errorf("notes %q", notes)
	}
	if err := r.Reserve(0, 3); err != nil {
		t.Fatal(err)
	}
	var out model.Logits
	if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{5, 6, 7}}}}, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Rows) != 1 || len(out.Rows[0]) != 1 || len(out.Rows[0][0]) != r.Info().VocabSize {
		t.Fatalf("logits shape %d", len(out.Rows))
	}
	// The wrapper keeps the model's prefix cache reachable (the engine finds
	// it with model.As; without it kt serve ran with the cache off).
	if pc, ok := model.As[model.PrefixCache](r); !ok {
		t.Errorf("the loaded runner %T hides model.PrefixCache", r)
	} else if pc.CachedPrefixTokens() != 0 {
		t.Errorf("%d tokens cached before anything was", pc.CachedPrefixTokens())
	}
	if arch.ExpertPath(r) == "" {
		t.Error("ExpertPath does not see through the wrapper")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
