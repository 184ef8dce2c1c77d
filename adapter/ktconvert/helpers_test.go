package ktconvert

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/ktserve/kt/adapter/ktsynth"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// loaded is a safetensors file read fully into memory (test sizes only).
type loaded struct {
	tensors map[string]safetensors.Tensor
	meta    map[string]string
	order   []string // data order
}

func load(t *testing.T, path string) loaded {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	l := loaded{tensors: map[string]safetensors.Tensor{}, meta: map[string]string{}}
	for k, v := range f.Metadata() {
		l.meta[k] = v
	}
	for _, ti := range f.Tensors() {
		tt, err := f.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		tt.Data = bytes.Clone(tt.Data)
		l.tensors[ti.Name] = tt
		l.order = append(l.order, ti.Name)
	}
	return l
}

func (l loaded) names() []string {
	s := make([]string, 0, len(l.tensors))
	for k := range l.tensors {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// synth writes a synthetic KT SFT output into a new directory under t's
// temp dir and returns its path.
func synth(t testing.TB, s ktsynth.Spec) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kt_sft_out")
	if err := ktsynth.Write(dir, s); err != nil {
		t.Fatal(err)
	}
	return dir
}

// smallSpec is a few layers of Qwen3.5 MoE with tiny widths.
func smallSpec() ktsynth.Spec {
	s := ktsynth.Default(ktsynth.TinyQwen35())
	return s
}

func convert(t *testing.T, o Options) (*Summary, error) {
	t.Helper()
	return Convert(context.Background(), o)
}

func f64(v float64) *float64 { return &v }

// writeST writes tensors filled with a counter to path.
func writeST(t *testing.T, path string, specs map[string][]int64, dt tensor.DType) {
	t.Helper()
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	var ts []safetensors.Tensor
	c := byte(1)
	for _, n := range names {
		ne, err := tensor.NumElements(specs[n])
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, int(ne)*dt.Size())
		for i := range data {
			data[i] = c + byte(i)
		}
		c += 17
		ts = append(ts, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: n, DType: dt, Shape: specs[n]}, Data: data})
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
}

// listDir returns the names in dir, sorted.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, e := range es {
		s = append(s, e.Name())
	}
	return s
}
