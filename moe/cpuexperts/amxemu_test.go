//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// edgeCounts are the tokens per expert of countedBatch: around the
// engine's prefill threshold (AMX_MIN_M = 8: 7 decode, 8 and 9 prefill),
// around the 16-row halves and 32-row blocks of the tile order (15, 16,
// 17, 31, 32, 33) and past a 32-token prefill chunk (33, 65), with
// experts of few tokens (decode, row-major rows) between them.
var edgeCounts = []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 65, 3, 12, 24, 47}

// countedBatch routes exactly counts[x] of tokens tokens to expert x
// (distinct tokens, at most topK experts a token; the rest of a token's
// ids are -1), with random inputs and weights.
func countedBatch(seed uint64, tokens, topK, hidden int, counts []int) (x []float32, ids []int32, wts []float32) {
	rng := rand.New(rand.NewPCG(seed, 777))
	x, _, _ = RandomBatch(seed, tokens, 1, hidden, 1)
	ids = make([]int32, tokens*topK)
	wts = make([]float32, tokens*topK)
	for i := range ids {
		ids[i] = -1
	}
	used := make([]int, tokens)
	for e, c := range counts {
		// c distinct tokens, those with the most room left first (ties in random order)
		perm := rng.Perm(tokens)
		slices.SortStableFunc(perm, func(a, b int) int { return used[a] - used[b] })
		if c > tokens || (c > 0 && used[perm[c-1]] >= topK) {
			panic(fmt.Sprintf("countedBatch: %d tokens x top-%d cannot hold the counts %v", tokens, topK, counts))
		}
		for _, tk := range perm[:c] {
			ids[tk*topK+used[tk]] = int32(e)
			wts[tk*topK+used[tk]] = rng.Float32() + 0.05
			used[tk]++
		}
	}
	return x, ids, wts
}

// TestAMXEmulatedMatchesAVX512 runs the engine's AMX prefill path with the
// tile kernels emulated (Config.amxEmu: tile-order gather, bf16 h stored
// in tile order, the int8/int4 h and x rows in tile order, the int4
// unpack, non-temporal down outputs, prefill chunks) against the same
// layer on the AVX-512 kernels, token by token, on a routing with edgeCounts
// tokens per expert: phased and fused, one and two pools, chunks of 32 and
// 128 tokens, and pool slices of the intermediate size that are a multiple
// of 32 but not of 64. Both paths quantize the same weights and activations the
// same way; they differ only in summation order (and the roundings of h it
// may flip), so each token's output must agree to 1e-3 of its norm. A row
// stored where the kernel does not read it (a wrong tile-order offset, a
// block marked row-major, a gather into the wrong slot) moves the token's
// output by the size of that expert's share, far more.
func TestAMXEmulatedMatchesAVX512(t *testing.T) {
	if !emuAMX() {
		t.Skip("needs AVX-512 with VNNI and BF16 and no AMX (with AMX the real kernels are tested)")
	}
	const tokens, topK = 80, 8
	x, ids, w := countedBatch(5, tokens, topK, small.Hidden, edgeCounts)
	// measured: 1.8e-4 (bf16 h rounded the other way in a few elements),
	// the int methods bitwise equal (exact integer sums, the same epilogue)
	const rowTol = 1e-3
	type run struct {
		pools, chunk int
		fused        bool
		inter        int // 0: small's
	}
	runs := []run{{1, 0, false, 0}, {1, 0, true, 0}, {2, 32, false, 0},
		{2, 0, false, 192}} // pool slices of 96 rows: int8 down projections of 1.5 AMX tile steps
	srcs := sourceCache{}
	for _, m := range []Method{AMXBF16, AMXINT8, AMXINT4, BF16, FP8} {
		for _, r := range runs {
			spec := small
			spec.Method = m
			if r.inter > 0 {
				spec.Intermediate = r.inter
			}
			if CheckShape(m, spec.Hidden, spec.Intermediate, r.pools) != nil {
				continue
			}
			src := srcs.get(m, spec)
			name := fmt.Sprintf("%s/pools%d/I%d/chunk%d/fused=%v", m, r.pools, spec.Intermediate, r.chunk, r.fused)
			var out [2][]float32
			calls := emuAMXCalls()
			for i, isa := range []ISA{ISAAVX512, amxEmuLevel} {
				cfg := Config{Threads: 2 * r.pools, Pools: r.pools, MaxTokens: tokens, TopK: topK, PrefillChunk: r.chunk,
					Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate, fusedMaxSlots: -1}
				if r.fused {
					cfg.fusedMaxSlots = tokens * topK // all of them (the default stops at 512)
				}
				e := newEngineCfg(t, withISA(cfg, isa))
				l, err := e.NewLayer(spec, src)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				out[i] = make([]float32, tokens*spec.Hidden)
				if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out[i]}); err != nil {
					t.Fatalf("%s %s: %v", name, isa, err)
				}
				if ph := e.Phases(); (ph.Fused == 1) != r.fused {
					t.Fatalf("%s %s: %+v, want the fused path %v", name, isa, ph, r.fused)
				}
				l.Close()
				e.Close()
			}
			if emuAMXCalls() == calls {
				t.Fatalf("%s: the emulated AMX kernels did not run", name)
			}
			H := spec.Hidden
			worst, bad := 0.0, 0
			for tk := 0; tk < tokens; tk++ {
				var d2, n2 float64
				for o := tk * H; o < (tk+1)*H; o++ {
					d := float64(out[1][o]) - float64(out[0][o])
					d2, n2 = d2+d*d, n2+float64(out[0][o])*float64(out[0][o])
				}
				if n2 == 0 {
					if d2 != 0 {
						t.Errorf("%s: token %d (experts %v) has no output on AVX-512 but %g emulated", name, tk, ids[tk*topK:(tk+1)*topK], math.Sqrt(d2))
					}
					continue
				}
				re := math.Sqrt(d2 / n2)
				worst = math.Max(worst, re)
				if re > rowTol {
					if bad++; bad <= 3 {
						t.Errorf("%s: token %d (experts %v): emulated AMX differs from AVX-512 by %.3g of its norm, want <= %g",
							name, tk, ids[tk*topK:(tk+1)*topK], re, rowTol)
					}
				}
			}
			t.Logf("%s: worst token %.2e", name, worst)
		}
	}
}

// TestAMXEmulationNotSelectable checks that the emulated AMX kernels are
// reached only through the unexported Config.amxEmu: "amx-emu" is no
// kernel level NewEngine accepts, and the emulation takes no other level.
func TestAMXEmulationNotSelectable(t *testing.T) {
	cfg := Config{MaxTokens: 1, TopK: 1, Experts: 1, Hidden: 128, Intermediate: 128}
	bad := cfg
	bad.ISA = amxEmuLevel
	if _, err := NewEngine(bad); err == nil || !strings.Contains(err.Error(), "unknown kernel level") {
		t.Errorf("ISA %q: err = %v, want an unknown kernel level", amxEmuLevel, err)
	}
	bad = cfg
	bad.ISA, bad.amxEmu = ISAAVX512, true
	if _, err := NewEngine(bad); err == nil {
		t.Errorf("emulated AMX at level avx512 accepted")
	}
	if !emuAMX() {
		return
	}
	e := newEngineCfg(t, withISA(cfg, amxEmuLevel))
	if k := e.Kernels(AMXINT8); k != "avx512-vnni decode, amx-emulated prefill" {
		t.Errorf("emulated AMX engine: AMXINT8 runs %q", k)
	}
}
