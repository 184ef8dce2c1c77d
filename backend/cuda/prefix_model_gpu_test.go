//go:build cgo

package cuda_test

import (
	"math"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/model"
)

// TestPrefixCacheModel runs the prefix cache through whole models on the
// GPU (KV pages shared between slots in the GPU's paged KV cache; for the
// hybrid models, recurrent-state snapshots taken and restored with
// LinearState.CopySlot): a 40-token prompt and a 24-token greedy answer
// are cached (63 tokens computed: 3 full pages, with a state snapshot at
// 48 for the hybrids), then a next turn (the 64 tokens and 10 more) is
// matched (48 tokens) and only its tail prefilled. Its last logprobs must
// match a whole prefill of the same prompt within modelTol (the GPU's
// GEMMs are not bit-identical across row counts), twice over (a second
// slot attaching the same pages).
func TestPrefixCacheModel(t *testing.T) {
	for _, fx := range []string{"qwen3moe-a", "qwen3next-a", "qwen35moe-b", "deepseekv3-b"} {
		t.Run(fx, func(t *testing.T) {
			r := loadPrefixModel(t, fx)
			pc, ok := r.(model.PrefixCache)
			if !ok {
				t.Fatalf("%T does not implement model.PrefixCache", r)
			}
			run := &runner{r: r, pos: map[int]int{}}
			vocab := r.Info().VocabSize
			seq := make([]int32, 40)
			for i := range seq {
				seq[i] = int32((i*37 + 11) % vocab)
			}
			row := run.forward(t, 0, seq, false)[0]
			for range 24 {
				tok := argmax(logSoftmax(row))
				seq = append(seq, tok)
				if len(seq) < 64 {
					row = run.forward(t, 0, []int32{tok}, false)[0]
				}
			}
			if err := pc.CachePrefix(0, 0, seq[:run.pos[0]]); err != nil {
				t.Fatal(err)
			}
			run.free(0)
			next := append(seq[:64:64], make([]int32, 10)...)
			for i := 64; i < len(next); i++ {
				next[i] = int32((i*53 + 7) % vocab)
			}
			whole := logSoftmax(run.forward(t, 3, next, false)[0])
			for _, slot := range []int{1, 2} {
				m, err := pc.MatchPrefix(slot, 0, next)
				if err != nil {
					t.Fatal(err)
				}
				if m != 48 {
					t.Fatalf("slot %d matched %d tokens, want 48", slot, m)
				}
				run.pos[slot] = m
				got := logSoftmax(run.forward(t, slot, next[m:], false)[0])
				var worst float64
				for i := range got {
					worst = math.Max(worst, math.Abs(got[i]-whole[i]))
				}
				if worst > modelTol {
					t.Errorf("slot %d: logprobs after a cache hit differ from a whole prefill by %.3g", slot, worst)
				}
				t.Logf("RESULT %s slot %d: 48 of %d tokens from the prefix cache, logprobs within %.3g of a whole prefill", fx, slot, len(next), worst)
			}
			if n := pc.CachedPrefixTokens(); n != 48 {
				t.Errorf("%d tokens cached, want 48", n)
			}
			pc.FlushPrefixCache()
			run.free(1)
			run.free(2)
			if m, _ := pc.MatchPrefix(1, 0, next); m != 0 {
				t.Errorf("matched %d tokens after a flush", m)
			}
		})
	}
}

// TestPrefixBranchModel runs the prefix cache's branch points through whole
// models on the GPU: after a 64-token sequence is cached (a state snapshot
// at 48 for the hybrids), a prompt sharing its first 32 tokens matches
// nothing on the hybrids but names 32 as its branch point; its prefill
// stops there, caches the 32 tokens with the state (CachePrefix while the
// slot runs on) and goes on. A third prompt with the same 32 tokens then
// resumes at 32. Both must match a whole prefill of the same prompt within
// modelTol. The plain-attention model matches the 32 tokens at once and
// names no branch point.
func TestPrefixBranchModel(t *testing.T) {
	for _, fx := range []string{"qwen3moe-a", "qwen35moe-b"} {
		t.Run(fx, func(t *testing.T) {
			hybrid := fx != "qwen3moe-a"
			r := loadPrefixModel(t, fx)
			pb, ok := r.(model.PrefixBrancher)
			if !ok {
				t.Fatalf("%T does not implement model.PrefixBrancher", r)
			}
			pc := r.(model.PrefixCache)
			run := &runner{r: r, pos: map[int]int{}}
			vocab := r.Info().VocabSize
			tokens := func(seed, n int) []int32 {
				out := make([]int32, n)
				for i := range out {
					out[i] = int32((i*37 + seed*101 + 11) % vocab)
				}
				return out
			}
			a := tokens(1, 64)
			run.forward(t, 0, a[:48], false)
			run.forward(t, 0, a[48:], false)
			if err := pc.CachePrefix(0, 0, a); err != nil {
				t.Fatal(err)
			}
			run.free(0)
			check := func(slot int, prompt []int32, wantMatch, wantBranch int) {
				t.Helper()
				whole := logSoftmax(run.forward(t, 3, prompt, false)[0])
				run.free(3)
				m, br, err := pb.MatchPrefixBranch(slot, 0, prompt)
				if err != nil {
					t.Fatal(err)
				}
				if m != wantMatch || br != wantBranch {
					t.Fatalf("slot %d: matched %d, branch %d; want %d, %d", slot, m, br, wantMatch, wantBranch)
				}
				run.pos[slot] = m
				if br > 0 {
					run.forward(t, slot, prompt[m:br], false)
					if err := pb.CacheBranch(slot, 0, prompt[:br]); err != nil {
						t.Fatal(err)
					}
				}
				got := logSoftmax(run.forward(t, slot, prompt[run.pos[slot]:], false)[0])
				var worst float64
				for i := range got {
					worst = math.Max(worst, math.Abs(got[i]-whole[i]))
				}
				if worst > modelTol {
					t.Errorf("slot %d: logprobs differ from a whole prefill by %.3g", slot, worst)
				}
				t.Logf("RESULT %s slot %d: matched %d, branch %d of %d tokens, logprobs within %.3g of a whole prefill", fx, slot, m, br, len(prompt), worst)
			}
			b := append(a[:32:32], tokens(2, 20)...)
			c := append(a[:32:32], tokens(3, 25)...)
			if hybrid {
				check(1, b, 0, 32)
			} else {
				check(1, b, 32, 0)
			}
			check(2, c, 32, 0)
		})
	}
}

// loadPrefixModel loads fixture fx on the GPU with room for 4 sequences and
// 2 kept state snapshots, closed when the test ends.
func loadPrefixModel(t *testing.T, fx string) model.Runner {
	t.Helper()
	g, err := cuda.NewBackendOn(gpu(t))
	if err != nil {
		t.Fatal(err)
	}
	r, err := arch.Load(fixtureDir(fx), arch.Options{MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16, Backend: g, PrefixSnapshots: 2})
	if err != nil {
		g.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); g.Close() })
	return r
}
