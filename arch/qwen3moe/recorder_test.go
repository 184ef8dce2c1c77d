package qwen3moe

import (
	"slices"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/internal/torchpt"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/expertdist"
)

// TestExpertRecorder runs a prefill and decode steps with the
// expert-distribution recorder on, through the backend's MoE op, through
// the CPU expert engine, and with decode graphs on (a backend that captures
// and replays): every pass counts tokens x top-k picks in each MoE layer
// and none in dense layers (no padding rows, no replay that skips the
// count), all paths record the same picks, and nothing is recorded once it
// stops.
func TestExpertRecorder(t *testing.T) {
	const fx = "qwen3moe-c" // has dense layers (mlp_only_layers)
	cfg, err := modelconfig.Load(fixtureDir(fx))
	if err != nil {
		t.Fatal(err)
	}
	L, E := len(cfg.Layers), cfg.NumExperts
	var dumps [][]float64
	for _, experts := range []string{"backend", "auto", "graphs"} {
		rec, err := expertdist.New(L, E, 16, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		o := arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 16, Experts: experts, ExpertRecorder: rec}
		if experts == "graphs" {
			be := &modeltest.FakeGraphs{Backend: cpu.New(cpu.Options{Threads: 2})}
			defer be.Close()
			o.Experts, o.Backend = "backend", be
		}
		r, err := Load(fixtureDir(fx), o)
		if err != nil {
			t.Fatal(err)
		}
		tr := testRunner{r}
		rec.Start()
		modeltest.Forward(t, tr, 0, []int32{5, 9, 2, 7, 11}, false)
		for _, tok := range []int32{3, 8, 1} {
			modeltest.Forward(t, tr, 0, []int32{tok}, false)
		}
		if st, _ := arch.GraphStatsOf(r); st.Captures+st.Replays != 0 {
			t.Errorf("%s: %d captures, %d replays while recording: recorded steps must run op by op", experts, st.Captures, st.Replays)
		}
		rec.Stop()
		for _, tok := range []int32{4, 6, 10} { // not recorded; graphs resume
			modeltest.Forward(t, tr, 0, []int32{tok}, false)
		}
		if st, _ := arch.GraphStatsOf(r); experts == "graphs" && st.Replays == 0 {
			t.Errorf("no replay after recording stopped: %+v", st)
		}
		path, err := rec.Dump()
		if err != nil {
			t.Fatal(err)
		}
		lc, passes := loadCounts(t, path)
		if passes != 4 {
			t.Errorf("%s: %d passes recorded, want 4", experts, passes)
		}
		for p, tokens := range []int{5, 1, 1, 1} {
			for l := range L {
				sum := 0.0
				for e := range E {
					sum += lc[(p*L+l)*E+e]
				}
				want := 0.0
				if cfg.Layers[l].IsMoE {
					want = float64(tokens * cfg.TopK)
				}
				if sum != want {
					t.Errorf("%s: pass %d layer %d: %v picks, want %v", experts, p, l, sum, want)
				}
			}
		}
		dumps = append(dumps, lc)
		r.Close()
	}
	for i := 1; i < len(dumps); i++ {
		if !slices.Equal(dumps[0], dumps[i]) {
			t.Errorf("path %d recorded other picks than the backend's MoE op", i)
		}
	}
}

// loadCounts reads a recorder dump: the logical_count elements and the
// number of passes.
func loadCounts(t *testing.T, path string) ([]float64, int) {
	t.Helper()
	v, err := torchpt.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	n, _ := m["num_passes"].(int)
	return m["logical_count"].(*torchpt.Tensor).Data, n
}
