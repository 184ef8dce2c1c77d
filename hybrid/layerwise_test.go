package hybrid

import (
	"strings"
	"testing"
	"time"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

func TestUseLayerwise(t *testing.T) {
	for _, c := range []struct {
		threshold, tokens int
		graph, want       bool
	}{
		{0, 1000, false, false},
		{-1, 1000, false, false},
		{512, 511, false, false},
		{512, 512, false, true},
		{512, 4096, false, true},
		{1, 1, false, true},
		{1, 1, true, false}, // a padded decode step of the graph path
		{8, 16, true, false},
	} {
		if got := UseLayerwise(c.threshold, c.tokens, c.graph); got != c.want {
			t.Errorf("UseLayerwise(%d, %d, %v) = %v, want %v", c.threshold, c.tokens, c.graph, got, c.want)
		}
	}
}

func TestCheckLayerwiseSource(t *testing.T) {
	mat := func(name string, dt tensor.DType, r, c int) backend.Host {
		return backend.Host{Name: name, DType: dt, Shape: []int{r, c}, Data: make([]byte, r*c*dt.Size())}
	}
	layer := func(dt tensor.DType, E int) *Weights {
		w := &Weights{HostGate: make([]backend.Host, E), HostUp: make([]backend.Host, E), HostDown: make([]backend.Host, E)}
		for e := range E {
			w.HostGate[e], w.HostUp[e], w.HostDown[e] = mat("g", dt, 4, 8), mat("u", dt, 4, 8), mat("d", dt, 8, 4)
		}
		return w
	}
	odd := layer(tensor.BF16, 2)
	odd.HostDown[1] = mat("d", tensor.BF16, 8, 2)
	for _, c := range []struct {
		name   string
		layers []*Weights
		want   string // "" accepted
	}{
		{"bf16 with a dense layer", []*Weights{nil, layer(tensor.BF16, 2), layer(tensor.BF16, 2)}, ""},
		{"f32", []*Weights{layer(tensor.F32, 3)}, ""},
		{"i8 refused", []*Weights{layer(tensor.I8, 2)}, "reads BF16, F16, F32 or block-scaled FP8"},
		{"mixed dtypes", []*Weights{layer(tensor.BF16, 2), layer(tensor.F32, 2)}, "the first MoE layer's"},
		{"other shape", []*Weights{layer(tensor.BF16, 2), odd}, "the first MoE layer's"},
		{"other expert count", []*Weights{layer(tensor.BF16, 2), layer(tensor.BF16, 3)}, "has 3 experts"},
	} {
		err := CheckLayerwiseSource(c.layers, "AMXINT4")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		case c.want != "" && !strings.Contains(err.Error(), "--kt-gpu-prefill-token-threshold 0"):
			t.Errorf("%s: %v does not say how to turn layerwise prefill off", c.name, err)
		}
	}
}

func TestLayerwiseStatsString(t *testing.T) {
	if s := (LayerwiseStats{}).String(); s != "" {
		t.Errorf("zero stats: %q, want \"\"", s)
	}
	s := LayerwiseStats{Steps: 2, Layers: 8, Uploads: 4, UploadBytes: 8 << 20, UploadTime: 6 * time.Millisecond, Updates: 3, Moved: 5}.String()
	for _, want := range []string{"2 passes", "8 MoE layers", "4 layer uploads (8.0 MiB, 1.50 ms", "3 layer updates, 5 experts moved"} {
		if !strings.Contains(s, want) {
			t.Errorf("%q lacks %q", s, want)
		}
	}
}
