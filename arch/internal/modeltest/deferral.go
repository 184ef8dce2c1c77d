package modeltest

import (
	"math"
	"testing"

	"github.com/ktserve/kt/internal/settings"
)

// DeferralRuns is the number of decode steps DeferralRows runs after its
// 3-token prompt.
const DeferralRuns = 8

// DeferralRows runs a 3-token prompt (all rows) and then DeferralRuns
// decode steps of one token each and returns every row's logprobs and the
// decoded tokens: the given ones (teacher forcing, so that runs with
// different deferral see the same inputs), or the greedy ones when decode
// is nil. Short prompts and single-token decode steps leave experts
// unprotected, so deferral has work to do (a long prefill protects most
// experts through the batch-wide OR).
func DeferralRows(t testing.TB, r Runner, vocab int, decode []int32) ([][]float64, []int32) {
	t.Helper()
	prompt := []int32{int32(17 % vocab), int32(123 % vocab), int32(45 % vocab)}
	lps := LogSoftmaxRows(Forward(t, r, 0, prompt, true))
	var toks []int32
	for i := range DeferralRuns {
		tok := Argmax(lps[len(lps)-1])
		if decode != nil {
			tok = decode[i]
		}
		toks = append(toks, tok)
		lps = append(lps, LogSoftmax(Forward(t, r, 0, []int32{tok}, false)[0]))
	}
	return lps, toks
}

// WorstDiff returns the largest |a − b| over two runs' logprob rows.
func WorstDiff(a, b [][]float64) float64 {
	var worst float64
	for i := range a {
		for v := range a[i] {
			worst = math.Max(worst, math.Abs(a[i][v]-b[i][v]))
		}
	}
	return worst
}

// DeferralMatchesReference checks expert deferral on a model whose routed
// experts the CPU expert engine serves. load(experts, d) loads the model
// with the routed experts on the backend's MoE op ("backend": the
// reference form of deferral, computed with backend ops) or the engine
// ("BF16") and --kt-max-deferred-experts-per-token d. For d in ds and each
// of EngineLevels, the engine's logprobs (3-token prompt, DeferralRuns
// teacher-forced decode steps) must match the reference's within
// EngineTol, and both must move away from d = 0 by more than 10·Tol
// (deferral changes what the layers see, so a run that ignored d would
// fail). It skips when the engine cannot run here.
func DeferralMatchesReference(t *testing.T, vocab int, ds []int, load func(experts string, d int) (EngineRunner, error)) {
	t.Helper()
	run := func(experts string, d int, decode []int32) ([][]float64, []int32, string) {
		t.Helper()
		r, err := load(experts, d)
		if err != nil {
			if experts != "backend" {
				t.Skipf("CPU expert engine unavailable: %v", err)
			}
			t.Fatal(err)
		}
		defer r.Close()
		p := r.ExpertPath()
		t.Logf("%s, D=%d: %s", experts, d, p)
		lps, toks := DeferralRows(t, r, vocab, decode)
		return lps, toks, p
	}
	// the reference without deferral decodes greedily; every other run
	// is fed its tokens
	base, decode, _ := run("backend", 0, nil)
	refs := map[int][][]float64{}
	for _, d := range ds {
		refs[d], _, _ = run("backend", d, decode)
	}
	for _, level := range EngineLevels() {
		t.Setenv(settings.ExpertISA.Name, level)
		eng0, _, path := run("BF16", 0, decode)
		tol := EngineTol(path)
		t.Logf("%s=%q, D=0: engine vs reference %.3g (bound %g)", settings.ExpertISA.Name, level, WorstDiff(eng0, base), tol)
		for _, d := range ds {
			ref := refs[d]
			eng, _, _ := run("BF16", d, decode)
			diff, moved, engMoved := WorstDiff(eng, ref), WorstDiff(ref, base), WorstDiff(eng, eng0)
			t.Logf("%s=%q, D=%d: engine vs reference %.3g; reference moved from D=0 by %.3g, engine by %.3g", settings.ExpertISA.Name, level, d, diff, moved, engMoved)
			if diff > tol {
				t.Errorf("%s=%q, D=%d: engine and reference differ by %g > %g", settings.ExpertISA.Name, level, d, diff, tol)
			}
			if moved < 10*Tol || engMoved < 10*Tol {
				t.Errorf("%s=%q, D=%d: logprobs moved from D=0 by only %g (reference) / %g (engine): is deferral applied?", settings.ExpertISA.Name, level, d, moved, engMoved)
			}
		}
	}
}
