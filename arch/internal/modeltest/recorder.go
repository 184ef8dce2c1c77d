package modeltest

import (
	"slices"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/internal/torchpt"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/expertdist"
)

// ExpertRecorder runs a 5-token prefill and 3 decode steps of the model in
// dir with the expert-distribution recorder on, through the backend's MoE
// op, through the CPU expert engine ("auto"), and with decode graphs on (a
// backend that captures and replays): every pass counts tokens x top-k
// picks in each MoE layer and none in dense layers (no padding rows, no
// replay that skips the count), all paths record the same picks, and
// nothing is recorded once it stops. Token ids stay below 12.
func ExpertRecorder(t *testing.T, dir string, load func(dir string, o arch.Options) (Runner, error)) {
	t.Helper()
	cfg, err := modelconfig.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	L, E := len(cfg.Layers), cfg.NumExperts
	var dumps [][]float64
	for _, path := range []string{"backend", "auto", "graphs"} {
		rec, err := expertdist.New(L, E, 16, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		o := arch.Options{MaxSeqs: 1, MaxTotalTokens: 64, MaxBatchTokens: 16, Threads: 2, Experts: path, ExpertRecorder: rec}
		if path == "graphs" {
			be := &FakeGraphs{Backend: cpu.New(cpu.Options{Threads: 2})}
			defer be.Close()
			o.Experts, o.Backend = "backend", be
		}
		r, err := load(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		rec.Start()
		Forward(t, r, 0, []int32{5, 9, 2, 7, 11}, false)
		for _, tok := range []int32{3, 8, 1} {
			Forward(t, r, 0, []int32{tok}, false)
		}
		if st, _ := arch.GraphStatsOf(r); st.Captures+st.Replays != 0 {
			t.Errorf("%s: %d captures, %d replays while recording: recorded steps must run op by op", path, st.Captures, st.Replays)
		}
		rec.Stop()
		for _, tok := range []int32{4, 6, 10} { // not recorded; graphs resume
			Forward(t, r, 0, []int32{tok}, false)
		}
		if st, _ := arch.GraphStatsOf(r); path == "graphs" && st.Replays == 0 {
			t.Errorf("no replay after recording stopped: %+v", st)
		}
		file, err := rec.Dump()
		if err != nil {
			t.Fatal(err)
		}
		lc, passes := recorderCounts(t, file)
		if passes != 4 {
			t.Errorf("%s: %d passes recorded, want 4", path, passes)
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
					t.Errorf("%s: pass %d layer %d: %v picks, want %v", path, p, l, sum, want)
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

// recorderCounts reads a recorder dump: the logical_count elements and the
// number of passes.
func recorderCounts(t *testing.T, path string) ([]float64, int) {
	t.Helper()
	v, err := torchpt.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	n, _ := m["num_passes"].(int)
	return m["logical_count"].(*torchpt.Tensor).Data, n
}
