package arch_test

import (
	"strings"
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
