package servebench

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// lcp is the length of the longest common prefix of a and b.
func lcp(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestSharedPrefixRequests(t *testing.T) {
	const vocab = 5000
	for _, c := range []struct {
		name string
		cfg  SharedPrefixConfig
	}{
		{"exact", SharedPrefixConfig{NumGroups: 4, PromptsPerGroup: 6, SystemPromptLen: 40, QuestionLen: 9, OutputLen: 5, RangeRatio: 1}},
		{"ranged", SharedPrefixConfig{NumGroups: 5, PromptsPerGroup: 3, SystemPromptLen: 50, QuestionLen: 20, OutputLen: 8, RangeRatio: 0.5}},
		{"ratio0", SharedPrefixConfig{NumGroups: 3, PromptsPerGroup: 4, SystemPromptLen: 8, QuestionLen: 3, OutputLen: 2, RangeRatio: 0}},
		{"one", SharedPrefixConfig{NumGroups: 1, PromptsPerGroup: 1, SystemPromptLen: 1, QuestionLen: 1, OutputLen: 1, RangeRatio: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cfg.validate(); err != nil {
				t.Fatal(err)
			}
			reqs := sharedPrefixRequests(newRNG(7), c.cfg, vocab)
			if len(reqs) != c.cfg.NumGroups*c.cfg.PromptsPerGroup {
				t.Fatalf("%d requests, want %d", len(reqs), c.cfg.NumGroups*c.cfg.PromptsPerGroup)
			}
			lo := func(full int) int { return max(int(float64(full)*c.cfg.RangeRatio), 1) }
			systems := map[int][]int{}
			count := map[int]int{}
			for i, r := range reqs {
				count[r.group]++
				sys := r.ids[:r.prefixLen]
				q := len(r.ids) - r.prefixLen
				if r.prefixLen < lo(c.cfg.SystemPromptLen) || r.prefixLen > c.cfg.SystemPromptLen ||
					q < lo(c.cfg.QuestionLen) || q > c.cfg.QuestionLen ||
					r.outputLen < lo(c.cfg.OutputLen) || r.outputLen > c.cfg.OutputLen {
					t.Errorf("request %d: system %d, question %d, output %d outside the asked ranges", i, r.prefixLen, q, r.outputLen)
				}
				if c.cfg.RangeRatio == 1 && (r.prefixLen != c.cfg.SystemPromptLen || q != c.cfg.QuestionLen || r.outputLen != c.cfg.OutputLen) {
					t.Errorf("request %d: lengths %d/%d/%d, want exactly %d/%d/%d", i, r.prefixLen, q, r.outputLen, c.cfg.SystemPromptLen, c.cfg.QuestionLen, c.cfg.OutputLen)
				}
				for _, id := range r.ids {
					if id < 0 || id >= vocab {
						t.Fatalf("request %d: id %d outside [0, %d)", i, id, vocab)
					}
				}
				if s, ok := systems[r.group]; !ok {
					systems[r.group] = sys
				} else if !slices.Equal(s, sys) {
					t.Errorf("request %d: group %d's system prompt differs from the group's first", i, r.group)
				}
			}
			for g := range c.cfg.NumGroups {
				if count[g] != c.cfg.PromptsPerGroup {
					t.Errorf("group %d: %d requests, want %d", g, count[g], c.cfg.PromptsPerGroup)
				}
			}
			// Different groups share (almost) nothing: random ids below
			// 5000 agree at a position with probability 1/5000.
			for i := range reqs {
				for j := i + 1; j < len(reqs); j++ {
					if reqs[i].group != reqs[j].group && lcp(reqs[i].ids, reqs[j].ids) > 2 {
						t.Errorf("requests %d and %d of groups %d and %d share %d leading ids", i, j, reqs[i].group, reqs[j].group, lcp(reqs[i].ids, reqs[j].ids))
					}
				}
			}
			// Deterministic per seed; another seed draws other prompts.
			again := sharedPrefixRequests(newRNG(7), c.cfg, vocab)
			if !slices.EqualFunc(reqs, again, func(a, b benchRequest) bool {
				return slices.Equal(a.ids, b.ids) && a.outputLen == b.outputLen && a.group == b.group && a.prefixLen == b.prefixLen
			}) {
				t.Error("the same seed drew different requests")
			}
			other := sharedPrefixRequests(newRNG(8), c.cfg, vocab)
			if slices.Equal(other[0].ids, reqs[0].ids) {
				t.Error("seeds 7 and 8 drew the same first prompt")
			}
			// Ordered is the same draw before the shuffle: group by group,
			// and the shuffled list is a permutation of it.
			oc := c.cfg
			oc.Ordered = true
			ordered := sharedPrefixRequests(newRNG(7), oc, vocab)
			key := func(r benchRequest) string {
				b, _ := json.Marshal([]any{r.ids, r.outputLen, r.group})
				return string(b)
			}
			var ko, ks []string
			for i, r := range ordered {
				if r.group != i/c.cfg.PromptsPerGroup {
					t.Fatalf("ordered request %d is of group %d, want %d", i, r.group, i/c.cfg.PromptsPerGroup)
				}
				ko = append(ko, key(r))
			}
			for _, r := range reqs {
				ks = append(ks, key(r))
			}
			slices.Sort(ko)
			slices.Sort(ks)
			if !slices.Equal(ko, ks) {
				t.Error("the shuffled requests are not a permutation of the ordered ones")
			}
		})
	}
	// With 64 requests the shuffle leaves them in group order with
	// probability ~0.
	cfg := SharedPrefixConfig{NumGroups: 8, PromptsPerGroup: 8, SystemPromptLen: 4, QuestionLen: 2, OutputLen: 1, RangeRatio: 1}
	reqs := sharedPrefixRequests(newRNG(1), cfg, 100)
	if slices.IsSortedFunc(reqs, func(a, b benchRequest) int { return a.group - b.group }) {
		t.Error("requests not shuffled")
	}
}

func TestSharedPrefixValidate(t *testing.T) {
	ok := DefaultSharedPrefix
	if err := ok.validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []struct {
		mod  func(*SharedPrefixConfig)
		want string
	}{
		{func(c *SharedPrefixConfig) { c.NumGroups = 0 }, "must be positive"},
		{func(c *SharedPrefixConfig) { c.QuestionLen = -1 }, "must be positive"},
		{func(c *SharedPrefixConfig) { c.RangeRatio = 1.5 }, "range ratio"},
		{func(c *SharedPrefixConfig) { c.NumGroups, c.PromptsPerGroup = 1<<11, 1<<10 }, "more than 2^20"},
		{func(c *SharedPrefixConfig) { c.SystemPromptLen = 1 << 25 }, "at most 2^24"},
		{func(c *SharedPrefixConfig) { c.NumGroups, c.PromptsPerGroup, c.SystemPromptLen = 1024, 1024, 1<<10 }, "more than 2^26"},
	} {
		cfg := DefaultSharedPrefix
		c.mod(&cfg)
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", cfg, err, c.want)
		}
	}
}

// TestBenchSharedPrefix runs the shared-prefix workload against the fake
// model's server (no prefix cache: it reports cached_tokens 0 in
// /generate's meta_info, and nothing in the OpenAI usage without
// --enable-cache-report, so "n/a").
func TestBenchSharedPrefix(t *testing.T) {
	fs := newFakeServer(t, "")
	sp := SharedPrefixConfig{NumGroups: 3, PromptsPerGroup: 4, SystemPromptLen: 24, QuestionLen: 6, OutputLen: 5, RangeRatio: 1}
	for _, backend := range []string{"sglang", "sglang-oai"} {
		t.Run(backend, func(t *testing.T) {
			res, err := Bench(context.Background(), BenchConfig{BaseURL: fs.url, Backend: backend, Dataset: DatasetSharedPrefix, SharedPrefix: sp,
				NumPrompts: 1000, MaxConcurrency: 4, Seed: 3, Warmup: 1, FlushCache: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.Completed != 12 || res.Failed != 0 || res.TotalInput != 12*30 || res.TotalOutput != 12*5 {
				t.Fatalf("completed %d failed %d input %d output %d: %v", res.Completed, res.Failed, res.TotalInput, res.TotalOutput, res.FirstErrors)
			}
			if res.Dataset != DatasetSharedPrefix || res.SharedPrefix == nil || *res.SharedPrefix != sp {
				t.Errorf("dataset %q %+v", res.Dataset, res.SharedPrefix)
			}
			// The fake engine computes every prompt token.
			if res.PrefillTokens == nil || *res.PrefillTokens != 12*30 || res.ServerCacheHitRate == nil || *res.ServerCacheHitRate != 0 {
				t.Errorf("server figures: prefill %v, hit rate %v", res.PrefillTokens, res.ServerCacheHitRate)
			}
			var b strings.Builder
			res.Write(&b)
			want := []string{"Groups x prompts per group:              3 x 4", "System/question/output len (ratio):      24/6/5 (1)",
				"Prefill tokens computed (server):        360", "Server cache hit rate (/metrics):        0.0000"}
			if backend == "sglang" {
				if res.CachedTokens == nil || *res.CachedTokens != 0 || res.CacheHitRate == nil || *res.CacheHitRate != 0 {
					t.Errorf("cached %v rate %v, want 0 and 0", res.CachedTokens, res.CacheHitRate)
				}
				want = append(want, "Cached prompt tokens:                    0 ", "Cache hit rate (cached/input):           0.0000")
			} else {
				if res.CachedTokens != nil || res.CacheHitRate != nil {
					t.Errorf("cached %v rate %v, want nil (not reported)", res.CachedTokens, res.CacheHitRate)
				}
				want = append(want, "Cached prompt tokens:                    n/a", "Cache hit rate (cached/input):           n/a")
			}
			for _, s := range want {
				if !strings.Contains(b.String(), s) {
					t.Errorf("report lacks %q:\n%s", s, b.String())
				}
			}
			line, err := json.Marshal(res)
			if err != nil || !strings.Contains(string(line), `"dataset_name":"generated-shared-prefix"`) || !strings.Contains(string(line), `"gsp_num_groups":3`) {
				t.Errorf("JSON %s %v", line, err)
			}
		})
	}
	for _, cfg := range []BenchConfig{
		{Dataset: "sharegpt"},
		{Dataset: DatasetSharedPrefix},
		{Dataset: DatasetSharedPrefix, SharedPrefix: SharedPrefixConfig{NumGroups: 1, PromptsPerGroup: 1, SystemPromptLen: 1, QuestionLen: 1, OutputLen: 1, RangeRatio: 2}},
	} {
		cfg.BaseURL, cfg.Vocab = fs.url, 10
		if _, err := Bench(context.Background(), cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}
