package arch_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/tp"
)

// TestLoadRanks loads a fixture over 2 CPU ranks the caller made
// (LoadRanks) and through Options.TensorParallel, and checks both give the
// same logits bit for bit, the prefix cache answering on every rank; and
// that a group of another size is refused.
func TestLoadRanks(t *testing.T) {
	dir := fixtures.Dir("qwen3moe-a")
	o := arch.Options{MaxSeqs: 2, MaxTotalTokens: 256, MaxBatchTokens: 64, PageSize: 16, Experts: "backend"}
	g, err := tp.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	a, err := arch.LoadRanks(dir, o, []backend.Backend{cpu.New(cpu.Options{Threads: 1}), cpu.New(cpu.Options{Threads: 1})}, g)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	o.Device, o.Threads, o.TensorParallel = "cpu", 2, 2
	b, err := arch.Load(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}
	run := func(r model.Runner) []float32 {
		if err := r.Reserve(0, len(toks)); err != nil {
			t.Fatal(err)
		}
		var out model.Logits
		if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: 0, Tokens: toks}}}, &out); err != nil {
			t.Fatal(err)
		}
		row := append([]float32(nil), out.Rows[0][0]...)
		pc, ok := model.As[model.PrefixCache](r)
		if !ok {
			t.Fatal("no prefix cache")
		}
		if err := pc.CachePrefix(0, 0, toks); err != nil || pc.CachedPrefixTokens() != 16 {
			t.Fatalf("CachePrefix: %v, %d tokens cached", err, pc.CachedPrefixTokens())
		}
		r.Free(0)
		if n, err := pc.MatchPrefix(1, 0, toks); err != nil || n != 16 {
			t.Fatalf("MatchPrefix: %d %v, want 16", n, err)
		}
		return row
	}
	ra, rb := run(a), run(b)
	for i := range ra {
		if ra[i] != rb[i] {
			t.Fatalf("logit %d: %v through LoadRanks, %v through Load", i, ra[i], rb[i])
		}
	}
	g3, _ := tp.NewLocal(3)
	if _, err := arch.LoadRanks(dir, o, []backend.Backend{cpu.New(cpu.Options{Threads: 1})}, g3); err == nil || !strings.Contains(err.Error(), "1 backends for a group of 3 ranks") {
		t.Errorf("mismatched group: %v", err)
	}
}

// flipRecorder is an expert recorder whose Recording flips at every call,
// as a recorder switched on and off by requests while steps run.
type flipRecorder struct {
	mu sync.Mutex
	on bool
}

func (f *flipRecorder) Recording() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.on = !f.on
	return f.on
}

func (f *flipRecorder) Add(int, []int32) {}

// recorderProbe is a runner that notes, at each Forward, whether its
// options' recorder records (twice, as a step asks more than once).
type recorderProbe struct {
	rec  arch.ExpertRecorder
	seen *[][2]bool
	mu   *sync.Mutex
}

func (p recorderProbe) Info() model.Info       { return model.Info{} }
func (p recorderProbe) Reserve(int, int) error { return nil }
func (p recorderProbe) Free(int)               {}
func (p recorderProbe) FreeTokens() int        { return 0 }
func (p recorderProbe) Close() error           { return nil }
func (p recorderProbe) Forward(*model.Batch, *model.Logits) error {
	a, b := p.rec.Recording(), p.rec.Recording()
	p.mu.Lock()
	*p.seen = append(*p.seen, [2]bool{a, b})
	p.mu.Unlock()
	return nil
}

// TestRanksSeeOneRecorderState runs steps over 3 ranks with a recorder
// switched at every read: within a step every rank must see one state (a
// recording step runs op by op and unpadded, another may be padded, and
// the ranks' collectives must pair up), and the state may change between
// steps.
func TestRanksSeeOneRecorderState(t *testing.T) {
	const name = "KTRecorderProbeForCausalLM"
	var mu sync.Mutex
	var seen [][2]bool
	arch.Register(name, func(dir string, o arch.Options) (model.Runner, error) {
		return recorderProbe{rec: o.ExpertRecorder, seen: &seen, mu: &mu}, nil
	})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures": ["`+name+`"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := tp.NewLocal(3)
	if err != nil {
		t.Fatal(err)
	}
	bes := []backend.Backend{cpu.New(cpu.Options{Threads: 1}), cpu.New(cpu.Options{Threads: 1}), cpu.New(cpu.Options{Threads: 1})}
	r, err := arch.LoadRanks(dir, arch.Options{ExpertRecorder: &flipRecorder{}}, bes, g)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var states []bool
	for step := range 4 {
		seen = nil
		if err := r.Forward(&model.Batch{}, &model.Logits{}); err != nil {
			t.Fatal(err)
		}
		if len(seen) != 3 {
			t.Fatalf("step %d: %d ranks ran", step, len(seen))
		}
		for _, s := range seen {
			if s != seen[0] || s[0] != s[1] {
				t.Fatalf("step %d: the ranks saw the recorder as %v", step, seen)
			}
		}
		states = append(states, seen[0][0])
	}
	if !slices.Contains(states, true) || !slices.Contains(states, false) {
		t.Errorf("the recorder's state never changed between steps: %v", states)
	}
}
