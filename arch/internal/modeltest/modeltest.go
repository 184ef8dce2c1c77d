// Package modeltest holds the checks every model definition in arch/
// runs in its tests: logprobs against the transformers reference fixtures
// (testdata/models), bit-identical chunked prefill and mixed batches,
// rejection of malformed batches and checkpoints, and the CPU expert engine
// against the backend's reference MoE op. Only tests import it.
package modeltest

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/engine/sample"
	"github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/internal/settings"
	"github.com/ktserve/kt/model"
)

// Tol is the logprob tolerance against transformers.
const Tol = 1e-3

// Runner is a model runner whose slots' cached lengths a test can read.
type Runner interface {
	model.Runner
	SlotLen(slot int) int
}

// Case is one prompt of a fixture's reference.json.
type Case = fixtures.Case

// FixtureDir is the directory of fixture name (testdata/models/name, or
// under $KT_TESTDATA_MODELS).
func FixtureDir(name string) string { return fixtures.Dir(name) }

// ReadRef reads the reference cases of fixture name.
func ReadRef(t testing.TB, name string) []Case { return fixtures.Load(t, name) }

// LogSoftmax returns the log-probabilities of a logits row in float64.
func LogSoftmax(row []float32) []float64 { return sample.LogSoftmax(row, nil) }

// LogSoftmaxRows returns LogSoftmax of each logits row.
func LogSoftmaxRows(rows [][]float32) [][]float64 {
	lps := make([][]float64, len(rows))
	for i, row := range rows {
		lps[i] = LogSoftmax(row)
	}
	return lps
}

// Argmax is the index of the largest value (the first of equals).
func Argmax(lp []float64) int32 {
	best := 0
	for i, v := range lp {
		if v > lp[best] {
			best = i
		}
	}
	return int32(best)
}

// CopyRows deep-copies logits rows (the runner reuses its buffers).
func CopyRows(rows [][]float32) [][]float32 {
	out := make([][]float32, len(rows))
	for i, r := range rows {
		out[i] = append([]float32(nil), r...)
	}
	return out
}

// Forward reserves and runs one single-chunk step of toks on slot (at the
// slot's current length) and returns copies of the logits rows.
func Forward(t testing.TB, r Runner, slot int, toks []int32, all bool) [][]float32 {
	t.Helper()
	if err := r.Reserve(slot, len(toks)); err != nil {
		t.Fatal(err)
	}
	var out model.Logits
	pos := r.SlotLen(slot)
	if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: slot, Pos: pos, Tokens: toks, AllLogits: all}}}, &out); err != nil {
		t.Fatal(err)
	}
	return CopyRows(out.Rows[0])
}

// RequireIdentical fails unless got and want are bit-identical.
func RequireIdentical(t testing.TB, what string, got, want [][]float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("%s: row %d logit %d = %v, want %v", what, i, j, got[i][j], want[i][j])
			}
		}
	}
}

// LoadFixture loads fixture with load on a fresh 2-thread CPU backend
// (its portable kernels unless simd) with 4 slots, 2048 tokens, 512 tokens a
// step, pages of 16 and the given routed-expert choice, and closes the
// runner, then the backend, when t ends.
func LoadFixture[R model.Runner](t testing.TB, fixture string, simd bool, experts string, load func(dir string, o arch.Options) (R, error)) R {
	t.Helper()
	be := cpu.New(cpu.Options{Threads: 2, NoSIMD: !simd})
	r, err := load(FixtureDir(fixture), arch.Options{MaxSeqs: 4, MaxTotalTokens: 2048, MaxBatchTokens: 512, PageSize: 16, Backend: be, Experts: experts})
	if err != nil {
		be.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); be.Close() })
	return r
}

// MatchesTransformersAll runs MatchesTransformers on each fixture as a
// subtest "fixture/simd=…", once with the SIMD kernels (where this CPU has
// them) and once with the portable ones; portable(fixture) false skips the
// portable run where the SIMD one ran (nil: always run it).
func MatchesTransformersAll(t *testing.T, fixtureNames []string, portable func(fixture string) bool, load func(t *testing.T, fixture string, simd bool) Runner) {
	t.Helper()
	probe := cpu.New(cpu.Options{Threads: 1})
	hasSIMD := probe.SIMD()
	probe.Close()
	for _, fx := range fixtureNames {
		for _, simd := range []bool{true, false} {
			if simd && !hasSIMD {
				continue
			}
			if !simd && hasSIMD && portable != nil && !portable(fx) {
				continue
			}
			t.Run(fmt.Sprintf("%s/simd=%v", fx, simd), func(t *testing.T) {
				MatchesTransformers(t, load(t, fx, simd), fx)
			})
		}
	}
}

// MakeSynthetic writes a full-width synthetic checkpoint to $KT_SYNTH_OUT
// with $KT_SYNTH_LAYERS layers (default 8) through write, for the decode
// benchmarks; it skips, naming what it would write, unless KT_SYNTH_OUT is
// set.
func MakeSynthetic(t *testing.T, what string, write func(dir string, layers int) error) {
	t.Helper()
	dir := settings.SynthOut.Get()
	if dir == "" {
		t.Skipf("set %s=DIR (and %s) to write a %s-shaped checkpoint", settings.SynthOut.Name, settings.SynthLayers.Name, what)
	}
	layers, err := settings.SynthLayers.Get()
	if err != nil {
		t.Fatal(err)
	}
	if layers == 0 {
		layers = 8
	}
	if err := write(dir, layers); err != nil {
		t.Fatal(err)
	}
}

// MatchesTransformers checks, on slot 0 of r, every prompt logprob of
// fixture's reference cases and, teacher-forcing the reference's greedy
// continuation through the cache, every greedy token (where the top-2
// margin exceeds Tol), its logprob and the top-8 logprobs, all within Tol.
// It returns the worst logprob difference.
func MatchesTransformers(t *testing.T, r Runner, fixture string) float64 {
	t.Helper()
	var worst float64
	for _, c := range ReadRef(t, fixture) {
		r.Free(0)
		rows := Forward(t, r, 0, c.PromptIDs, true)
		for i := 1; i < len(c.PromptIDs); i++ {
			lp := LogSoftmax(rows[i-1])[c.PromptIDs[i]]
			d := math.Abs(lp - *c.PromptLogprobs[i])
			worst = math.Max(worst, d)
			if d > Tol {
				t.Errorf("%s: prompt token %d logprob %.6f, reference %.6f", c.Name, i, lp, *c.PromptLogprobs[i])
			}
		}
		last := rows[len(rows)-1]
		for s, want := range c.GreedyIDs {
			lp := LogSoftmax(last)
			if got := Argmax(lp); got != want && c.Top2Margin[s] > Tol {
				t.Errorf("%s: greedy step %d: token %d, reference %d (margin %.4g)", c.Name, s, got, want, c.Top2Margin[s])
			}
			d := math.Abs(lp[want] - c.GreedyLogprobs[s])
			worst = math.Max(worst, d)
			if d > Tol {
				t.Errorf("%s: greedy step %d logprob %.6f, reference %.6f", c.Name, s, lp[want], c.GreedyLogprobs[s])
			}
			for _, p := range c.TopLogprobs[s] {
				if d := math.Abs(lp[int(p[0])] - p[1]); d > Tol {
					t.Errorf("%s: step %d top token %d logprob %.6f, reference %.6f", c.Name, s, int(p[0]), lp[int(p[0])], p[1])
				}
			}
			if s+1 < len(c.GreedyIDs) {
				last = Forward(t, r, 0, []int32{want}, false)[0]
			}
		}
	}
	t.Logf("worst logprob difference %.3g", worst)
	return worst
}

// ChunkedPrefillIdentical prefills fixture's longest reference prompt (at
// least minLen tokens) in chunks of each size and checks the logits are
// bit-identical to one prefill (size 1 is skipped in -short mode).
func ChunkedPrefillIdentical(t *testing.T, r Runner, fixture string, minLen int, sizes []int) {
	t.Helper()
	ChunkedPrefillCases(t, r, fixture, ReadRef(t, fixture), minLen, sizes)
}

// ChunkedPrefillCases is ChunkedPrefillIdentical over the prompts of cases
// (name names them): for a synthetic checkpoint without a reference.
func ChunkedPrefillCases(t *testing.T, r Runner, fixture string, cases []Case, minLen int, sizes []int) {
	t.Helper()
	c := cases[len(cases)-1]
	if len(c.PromptIDs) < minLen {
		t.Fatalf("%s: longest prompt has %d tokens, want >= %d to cross chunk boundaries", fixture, len(c.PromptIDs), minLen)
	}
	r.Free(0)
	whole := Forward(t, r, 0, c.PromptIDs, true)
	for _, size := range sizes {
		if testing.Short() && size == 1 {
			continue
		}
		r.Free(1)
		var got [][]float32
		for i := 0; i < len(c.PromptIDs); i += size {
			got = append(got, Forward(t, r, 1, c.PromptIDs[i:min(i+size, len(c.PromptIDs))], true)...)
		}
		RequireIdentical(t, fmt.Sprintf("%s chunk %d", fixture, size), got, whole)
	}
}

// MixedBatchIdentical runs several sequences at different positions in one
// step (a decode, a prefill chunk starting mid-prompt, a fresh prompt; slots
// 0-3 of a fresh r) and checks each row against the sequence run alone.
func MixedBatchIdentical(t *testing.T, r Runner, fixture string) {
	t.Helper()
	MixedBatchCases(t, r, fixture, ReadRef(t, fixture))
}

// MixedBatchCases is MixedBatchIdentical over the prompts of cases (name
// names them; at least 3, the second over 30 tokens, the third over 40).
func MixedBatchCases(t *testing.T, r Runner, fixture string, cases []Case) {
	t.Helper()
	a, b, c := cases[0].PromptIDs, cases[1].PromptIDs, cases[2].PromptIDs
	// alone
	aloneA := Forward(t, r, 0, a, true)
	r.Free(0)
	Forward(t, r, 0, b[:30], true)
	aloneB := Forward(t, r, 0, b[30:], true)
	r.Free(0)
	aloneC := Forward(t, r, 0, c[:40], true)
	r.Free(0)
	// together: A's prompt minus its last token and B's first 30 go first
	Forward(t, r, 2, a[:len(a)-1], false)
	Forward(t, r, 1, b[:30], false)
	chunks := []model.Chunk{
		{Slot: 1, Pos: 30, Tokens: b[30:], AllLogits: true},
		{Slot: 2, Pos: len(a) - 1, Tokens: a[len(a)-1:], AllLogits: true},
		{Slot: 3, Pos: 0, Tokens: c[:40], AllLogits: true},
	}
	for _, ch := range chunks {
		if err := r.Reserve(ch.Slot, len(ch.Tokens)); err != nil {
			t.Fatal(err)
		}
	}
	var out model.Logits
	if err := r.Forward(&model.Batch{Chunks: chunks}, &out); err != nil {
		t.Fatal(err)
	}
	RequireIdentical(t, fixture+" decode row", CopyRows(out.Rows[1]), aloneA[len(a)-1:])
	RequireIdentical(t, fixture+" prefill chunk", CopyRows(out.Rows[0]), aloneB)
	RequireIdentical(t, fixture+" fresh prompt", CopyRows(out.Rows[2]), aloneC)
}

// RejectsBadBatches checks that misuse of a runner with 4 slots, 512 tokens
// per step and a vocabulary of 1000 is an error, not a panic, and leaves
// the slot unchanged.
func RejectsBadBatches(t *testing.T, r Runner) {
	t.Helper()
	if err := r.Reserve(0, 4); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]model.Batch{
		"empty":         {},
		"bad slot":      {Chunks: []model.Chunk{{Slot: 9, Tokens: []int32{1}}}},
		"wrong pos":     {Chunks: []model.Chunk{{Slot: 0, Pos: 3, Tokens: []int32{1}}}},
		"no tokens":     {Chunks: []model.Chunk{{Slot: 0}}},
		"unreserved":    {Chunks: []model.Chunk{{Slot: 0, Tokens: make([]int32, 17)}}},
		"bad token":     {Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{1000}}}},
		"negative tok":  {Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{-1}}}},
		"slot twice":    {Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{1}}, {Slot: 0, Tokens: []int32{2}}}},
		"too many toks": {Chunks: []model.Chunk{{Slot: 1, Tokens: make([]int32, 513)}}},
	} {
		var out model.Logits
		if err := r.Forward(&b, &out); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if r.SlotLen(0) != 0 {
		t.Fatalf("rejected batches advanced slot 0 to %d", r.SlotLen(0))
	}
}

// LoadErrors checks that arch.Load fails on an empty directory, and
// that load fails on a directory with only configFixture's config.json, and
// with weightsFixture's (differently shaped) weights beside it, logging the
// errors.
func LoadErrors(t *testing.T, load func(dir string) error, configFixture, weightsFixture string) {
	t.Helper()
	LoadErrorsIn(t, load, FixtureDir(configFixture), FixtureDir(weightsFixture))
}

// LoadErrorsIn is LoadErrors with the checkpoints in configDir and
// weightsDir (model.safetensors): for synthetic checkpoints.
func LoadErrorsIn(t *testing.T, load func(dir string) error, configDir, weightsDir string) {
	t.Helper()
	if _, err := arch.Load(t.TempDir(), arch.Options{}); err == nil {
		t.Error("loading an empty directory succeeded")
	}
	dir := t.TempDir()
	cfg, _ := os.ReadFile(filepath.Join(configDir, "config.json"))
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	if err := load(dir); err == nil {
		t.Error("loading without weights succeeded")
	} else {
		t.Log(err)
	}
	// weights of a different config: shape errors name the tensor
	st, _ := os.ReadFile(filepath.Join(weightsDir, "model.safetensors"))
	os.WriteFile(filepath.Join(dir, "model.safetensors"), st, 0o644)
	if err := load(dir); err == nil {
		t.Error("loading mismatched weights succeeded")
	} else {
		t.Log(err)
	}
}

// EngineRunner is a runner that says what computes its routed experts.
type EngineRunner interface {
	Runner
	ExpertPath() string
}

// EngineMatchesReference runs a 40-token prompt (ids below vocab) through a
// model loaded with load("backend") (the backend's reference MoE op) and
// load("BF16") (the CPU expert engine) at each of EngineLevels, and
// compares every prompt logprob within EngineTol; it skips when the engine
// cannot run here. The model must not be too flat to compare (a logprob
// spread of at least 0.5).
func EngineMatchesReference(t *testing.T, vocab int, load func(experts string) (EngineRunner, error)) {
	t.Helper()
	prompt := make([]int32, 40)
	for i := range prompt {
		prompt[i] = int32(i * 37 % vocab)
	}
	run := func(experts string) ([][]float64, string) {
		t.Helper()
		r, err := load(experts)
		if err != nil {
			if experts != "backend" {
				t.Skipf("CPU expert engine unavailable: %v", err)
			}
			t.Fatal(err)
		}
		defer r.Close()
		p := r.ExpertPath()
		t.Logf("%s: %s", experts, p)
		lps := LogSoftmaxRows(Forward(t, r, 0, prompt, true))
		return lps, p
	}
	ref, _ := run("backend")
	var spread float64
	for j := range ref {
		for v := range ref[j] {
			spread = math.Max(spread, math.Abs(ref[j][v]-ref[j][0]))
		}
	}
	if spread < 0.5 {
		t.Fatalf("synthetic model too flat to compare (spread %g)", spread)
	}
	for _, level := range EngineLevels() {
		t.Setenv(settings.ExpertISA.Name, level)
		eng, path := run("BF16")
		worst, tol := WorstDiff(ref, eng), EngineTol(path)
		t.Logf("%s=%q: worst logprob difference %.3g (logprob spread %.3g, bound %g)", settings.ExpertISA.Name, level, worst, spread, tol)
		if worst > tol {
			t.Errorf("%s=%q: engine and reference differ by %g > %g", settings.ExpertISA.Name, level, worst, tol)
		}
	}
}

// EngineLevels returns the CPU expert engine's kernel levels the engine
// tests compare with the backend's reference MoE op, as values of
// KT_CPUEXPERTS_ISA (settings.ExpertISA): "avx2", where the engine's activations
// are f32 like the reference's, then the level the environment asks for
// (default auto: the machine's best) unless that is avx2 too.
func EngineLevels() []string {
	own := settings.ExpertISA.Value()
	if own == "avx2" {
		return []string{"avx2"}
	}
	return []string{"avx2", own}
}

// EngineBF16Tol is the logprob tolerance between the CPU expert engine and
// the reference MoE op where the engine rounds its activations to bf16
// (the BF16 method with AVX512_BF16 or AMX): the rounding (2^-9 relative
// per element; cpuexperts' TestLoRAActivations checks the engine matches
// it exactly, layer by layer) moves the synthetic models' logprobs by up to
// 0.0125 (qwen3moe TestExpertEngineMatchesReference; 0.0069 in its
// deferral test; 1.7e-4 in qwen3next's two) on a Xeon with AVX512_BF16, at
// f32 activations 1.2e-6.
const EngineBF16Tol = 0.04

// EngineTol returns the logprob tolerance against the reference MoE op for
// an engine whose ExpertPath is path: Tol with f32 activations,
// EngineBF16Tol with bf16 ones.
func EngineTol(path string) float64 {
	if strings.Contains(path, "bf16") || strings.Contains(path, "amx") {
		return EngineBF16Tol
	}
	return Tol
}

// LayoutsAgree writes a synthetic checkpoint with per-expert keys and with
// fused 3-D experts (write(dir, fused), same seed), loads each with load,
// and checks the last logits of a 3-token prompt are finite and
// bit-identical between the layouts.
func LayoutsAgree(t *testing.T, write func(dir string, fused bool) error, load func(dir string) (model.Runner, error)) {
	t.Helper()
	var logits [2][]float32
	for i, fused := range []bool{false, true} {
		dir := t.TempDir()
		if err := write(dir, fused); err != nil {
			t.Fatal(err)
		}
		r, err := load(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if err := r.Reserve(0, 3); err != nil {
			t.Fatal(err)
		}
		var out model.Logits
		if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{1, 2, 3}}}}, &out); err != nil {
			t.Fatal(err)
		}
		logits[i] = append([]float32(nil), out.Rows[0][0]...)
		for _, v := range logits[i] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("non-finite logit %v", v)
			}
		}
	}
	for j := range logits[0] {
		if logits[0][j] != logits[1][j] {
			t.Fatalf("per-expert and fused layouts differ at %d: %v vs %v", j, logits[0][j], logits[1][j])
		}
	}
}

// RequireExpertPath logs where run name computes its routed experts (path,
// a runner's ExpertPath) and fails the test unless path contains want.
func RequireExpertPath(t testing.TB, name, path, want string) {
	t.Helper()
	t.Logf("%s: %s", name, path)
	if !strings.Contains(path, want) {
		t.Fatalf("%s: experts run on %q, want %q", name, path, want)
	}
}
