package sample

import (
	"github.com/ktserve/kt/internal/vecmath"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func newTestSampler(p Params, prompt []int32) *Sequence {
	return NewSequence(p, prompt, 42)
}

// freq draws n tokens from row under p and returns the frequencies.
func freq(t *testing.T, p Params, row []float32, n int) []float64 {
	t.Helper()
	var sm Sampler
	s := newTestSampler(p, nil)
	f := make([]float64, len(row))
	for range n {
		tok, err := sm.Sample(s, row)
		if err != nil {
			t.Fatal(err)
		}
		f[tok]++
	}
	for i := range f {
		f[i] /= float64(n)
	}
	return f
}

func softmax(row []float32, temp float64) []float64 {
	out := make([]float64, len(row))
	var sum float64
	for i, v := range row {
		out[i] = math.Exp(float64(v) / temp)
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

func TestSamplerDistribution(t *testing.T) {
	row := []float32{2, 1, 0.5, 0, -1, 3}
	const n = 40000
	for _, tc := range []struct {
		name string
		p    Params
		want []float64
	}{
		{"temperature 1", Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}, softmax(row, 1)},
		{"temperature 2", Params{Temperature: 2, TopP: 1, RepetitionPenalty: 1}, softmax(row, 2)},
		{"top_k 2", Params{Temperature: 1, TopP: 1, TopK: 2, RepetitionPenalty: 1}, func() []float64 {
			e3, e2 := math.Exp(3), math.Exp(2)
			return []float64{e2 / (e2 + e3), 0, 0, 0, 0, e3 / (e2 + e3)}
		}()},
		{"top_p 0.8", Params{Temperature: 1, TopP: 0.8, RepetitionPenalty: 1}, func() []float64 {
			// softmax: 3 -> .61, 2 -> .22 (sum .84 >= .8): keep two.
			e3, e2 := math.Exp(3), math.Exp(2)
			return []float64{e2 / (e2 + e3), 0, 0, 0, 0, e3 / (e2 + e3)}
		}()},
		{"min_p 0.3", Params{Temperature: 1, TopP: 1, MinP: 0.3, RepetitionPenalty: 1}, func() []float64 {
			// p/pmax: 2 -> e^-1 = .37 kept, 1 -> e^-2 = .14 dropped.
			e3, e2 := math.Exp(3), math.Exp(2)
			return []float64{e2 / (e2 + e3), 0, 0, 0, 0, e3 / (e2 + e3)}
		}()},
	} {
		got := freq(t, tc.p, row, n)
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 0.015 {
				t.Errorf("%s: token %d frequency %.3f, want %.3f", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

func TestPenalties(t *testing.T) {
	var sm Sampler
	row := []float32{1.0, 0.9, -0.5, -0.6}
	// Repetition penalty divides positive logits and multiplies negative
	// ones of seen tokens: token 0 (seen) 1.0/2 = 0.5 < 0.9.
	s := newTestSampler(Params{TopP: 1, RepetitionPenalty: 2}, []int32{0, 2})
	if tok, _ := sm.Sample(s, row); tok != 1 {
		t.Errorf("repetition penalty: got %d want 1", tok)
	}
	// Frequency penalty grows with the count; presence is flat.
	s = newTestSampler(Params{TopP: 1, RepetitionPenalty: 1, FrequencyPenalty: 0.06}, nil)
	s.Accept(0)
	if tok, _ := sm.Sample(s, row); tok != 0 {
		t.Errorf("one use, frequency 0.06: got %d want 0", tok)
	}
	s.Accept(0)
	if tok, _ := sm.Sample(s, row); tok != 1 {
		t.Errorf("two uses, frequency 0.06: got %d want 1", tok)
	}
	s = newTestSampler(Params{TopP: 1, RepetitionPenalty: 1, PresencePenalty: 0.2}, nil)
	s.Accept(0)
	if tok, _ := sm.Sample(s, row); tok != 1 {
		t.Errorf("presence: got %d want 1", tok)
	}
	// Negative penalties encourage.
	s = newTestSampler(Params{TopP: 1, RepetitionPenalty: 1, PresencePenalty: -2}, nil)
	s.Accept(3)
	if tok, _ := sm.Sample(s, row); tok != 3 {
		t.Errorf("negative presence: got %d want 3", tok)
	}
	// The row itself is left alone.
	if row[0] != 1.0 {
		t.Errorf("sample modified the logits row")
	}
}

func TestLargest(t *testing.T) {
	var sm Sampler
	x := []float32{1, 5, 3, 5, -1, 4}
	got := sm.Largest(x, 3)
	want := []int32{1, 3, 5}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("largest %v want %v", got, want)
		}
	}
}

func BenchmarkSampleTopP(b *testing.B) {
	const vocab = 151936
	row := make([]float32, vocab)
	x := uint64(1)
	for i := range row {
		x = x*6364136223846793005 + 1442695040888963407
		row[i] = float32(x>>40) / float32(1<<24) * 20
	}
	var sm Sampler
	s := newTestSampler(Params{Temperature: 0.7, TopP: 0.9, TopK: 0, RepetitionPenalty: 1}, nil)
	for b.Loop() {
		if _, err := sm.Sample(s, row); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSampleGreedy(b *testing.B) {
	const vocab = 151936
	row := make([]float32, vocab)
	for i := range row {
		row[i] = float32(i%977) / 977
	}
	var sm Sampler
	s := newTestSampler(Params{Temperature: 0, TopP: 1, RepetitionPenalty: 1}, nil)
	for b.Loop() {
		if _, err := sm.Sample(s, row); err != nil {
			b.Fatal(err)
		}
	}
}

func TestLogSoftmax(t *testing.T) {
	row := []float32{2, 1, 0.5, 0, -1, 3, -40}
	lp := LogSoftmax(row, make([]float64, 2))
	mx, lse := LogSumExp(row)
	var total float64
	for i, v := range lp {
		total += math.Exp(v)
		if d := math.Abs(v - float64(Logprob(row, int32(i), mx, lse))); d > 1e-6 {
			t.Errorf("token %d: LogSoftmax %g, Logprob %g", i, v, Logprob(row, int32(i), mx, lse))
		}
	}
	if len(lp) != len(row) || math.Abs(total-1) > 1e-12 {
		t.Errorf("%d logprobs summing to probability %g", len(lp), total)
	}
}

// TestNucleusAllMatchesSort checks the bucketed nucleus against a full sort:
// the same set of tokens for many distributions and top-p values.
func TestNucleusAllMatchesSort(t *testing.T) {
	next := uniform(7)
	for trial := 0; trial < 60; trial++ {
		n := 1 + int(next()*3000)
		w := make([]float32, n)
		spread := 1 + next()*40
		for i := range w {
			w[i] = float32(math.Exp(-next() * spread))
			if trial%7 == 0 && i%5 == 0 {
				w[i] = 0.5 // ties
			}
		}
		w[int(next()*float64(n))] = 1
		topP := 0.05 + next()*0.9
		all := make([]int32, n)
		var total float64
		for i := range all {
			all[i] = int32(i)
			total += float64(w[i])
		}
		var sm Sampler
		ns := sm.nucleusCut(w, all, topP, total)
		got := ns.members(w, all, nil)
		t0 := float32((1 - topP) * total / float64(n))
		pre := vecmath.Above(w, math.Nextafter32(t0, 0), nil)
		if ps := sm.nucleusCut(w, pre, topP, total); !slices.Equal(ps.members(w, pre, nil), got) {
			t.Fatalf("trial %d: prefiltered set differs from the whole row's", trial)
		}
		var mass float64
		for _, i := range got {
			mass += float64(w[i])
		}
		if math.Abs(mass-ns.mass) > 1e-9*mass {
			t.Fatalf("trial %d: set mass %v, its members sum to %v", trial, ns.mass, mass)
		}
		slices.SortFunc(all, bestFirst(w))
		want := nucleus(all, w, topP, total)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d (n %d, top-p %.3f): bucketed set of %d tokens, sorted set of %d", trial, n, topP, len(got), len(want))
		}
	}
}

// TestLogSumExp compares the float32-exponential LogSumExp with float64.
func TestLogSumExp(t *testing.T) {
	row := make([]float32, 151936)
	x := uint64(3)
	for i := range row {
		x = x*6364136223846793005 + 1442695040888963407
		row[i] = float32(x>>40)/float32(1<<24)*30 - 15
	}
	mx, lse := LogSumExp(row)
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	if d := math.Abs(lse - math.Log(s)); d > 3e-7 {
		t.Errorf("lse %v, float64 %v: differ by %g", lse, math.Log(s), d)
	}
}

func BenchmarkLogSumExp(b *testing.B) {
	row := make([]float32, 151936)
	for i := range row {
		row[i] = float32(i%977) / 97
	}
	for b.Loop() {
		LogSumExp(row)
	}
}

// peakedRow is a vocabulary-wide logits row shaped like a language model's:
// a few dozen plausible tokens, a long tail far below them.
func peakedRow(vocab int) []float32 {
	row := make([]float32, vocab)
	x := uint64(7)
	for i := range row {
		x = x*6364136223846793005 + 1442695040888963407
		row[i] = float32(x>>40)/float32(1<<24)*6 - 3 // tail in [-3, 3)
	}
	for i := range 40 {
		row[(i*7919)%vocab] = 14 + float32(i%8)
	}
	return row
}

// BenchmarkSampleTemperature is the sampler on a 152k-vocabulary row at the
// settings chat clients send most (temperature only; top-p 0.95 with
// top-k 0; min-p), a peaked row as models give.
func BenchmarkSampleTemperature(b *testing.B) {
	// flat: logits spread over 4 nats, as a random model gives; most of
	// the vocabulary is in a 0.95 nucleus
	flat := make([]float32, 151936)
	x := uint64(9)
	for i := range flat {
		x = x*6364136223846793005 + 1442695040888963407
		flat[i] = float32(x>>40) / float32(1<<24) * 4
	}
	for _, r := range []struct {
		name string
		row  []float32
	}{{"peaked", peakedRow(151936)}, {"flat", flat}} {
		b.Run(r.name, func(b *testing.B) { benchSettings(b, r.row) })
	}
}

// benchSettings runs the sampler on row at the settings chat clients send.
func benchSettings(b *testing.B, row []float32) {
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"t=1", Params{Temperature: 1, TopP: 1, RepetitionPenalty: 1}},
		{"t=0.7", Params{Temperature: 0.7, TopP: 1, RepetitionPenalty: 1}},
		{"t=0.7,top_p=0.95", Params{Temperature: 0.7, TopP: 0.95, RepetitionPenalty: 1}},
		{"t=0.7,top_k=20,top_p=0.8", Params{Temperature: 0.7, TopK: 20, TopP: 0.8, RepetitionPenalty: 1}},
		{"t=1,min_p=0.05", Params{Temperature: 1, TopP: 1, MinP: 0.05, RepetitionPenalty: 1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var sm Sampler
			s := newTestSampler(c.p, nil)
			for b.Loop() {
				if _, err := sm.Sample(s, row); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDrawBlocksMatchesDraw: the block draw picks what draw's scan over the
// whole row picks from the same uniform point, on rows with zeros, a tail
// block shorter than drawBlock and mass spread over many orders of
// magnitude; a row without mass gives -1, and a point that rounding puts
// past every block gives the last index with mass, as draw does.
func TestDrawBlocksMatchesDraw(t *testing.T) {
	next := uniform(3)
	for _, n := range []int{1, 255, 256, 257, 1000, 151936} {
		for _, kind := range []string{"flat", "peaked", "sparse"} {
			w := make([]float32, n)
			for i := range w {
				switch kind {
				case "flat":
					w[i] = float32(next())
				case "peaked":
					w[i] = float32(math.Exp(-30 * next()))
				case "sparse":
					if next() < 0.01 {
						w[i] = float32(next())
					}
				}
			}
			if kind == "sparse" {
				w[n-1] = 0.5
			}
			blocks := make([]float64, (n+drawBlock-1)/drawBlock)
			var total float64
			for k := range blocks {
				for _, v := range w[k*drawBlock : min((k+1)*drawBlock, n)] {
					blocks[k] += float64(v)
				}
				total += blocks[k]
			}
			for seed := range uint64(300) {
				u := rand.New(rand.NewPCG(seed, 1)).Float64()
				a := drawBlocks(u, w, blocks, total)
				b := draw(u, w, nil)
				if a != b {
					t.Fatalf("n=%d %s seed %d: block draw %d, draw %d", n, kind, seed, a, b)
				}
				if a < 0 || w[a] <= 0 {
					t.Fatalf("n=%d %s seed %d: drew %d without mass", n, kind, seed, a)
				}
			}
		}
	}
	zero := make([]float32, 600)
	if got := drawBlocks(0.5, zero, make([]float64, 3), 0); got != -1 {
		t.Errorf("no mass: drew %d", got)
	}
	w := make([]float32, 600)
	w[10], w[300] = 1, 1
	// a total larger than the blocks hold: the point may fall past them
	blocks := []float64{1, 1, 0}
	for seed := range uint64(50) {
		if got := drawBlocks(rand.New(rand.NewPCG(seed, 2)).Float64(), w, blocks, 4); got != 10 && got != 300 {
			t.Fatalf("seed %d: drew %d", seed, got)
		}
	}
}

// TestTopKMatchesLargest: the prefiltered top-k is Largest's pick, order
// included, on probability rows (maximum 1) with ties at the k-th value,
// underflowed zeros and fewer values above each threshold than k.
func TestTopKMatchesLargest(t *testing.T) {
	next := uniform(5)
	var sm Sampler
	for trial := range 80 {
		n := 1 + int(next()*5000)
		w := make([]float32, n)
		spread := 1 + next()*60
		for i := range w {
			w[i] = float32(math.Exp(-next() * spread))
			if trial%5 == 0 && i%7 == 0 {
				w[i] = 1e-4 // ties, some at the k-th value
			}
			if trial%3 == 0 && i%11 == 0 {
				w[i] = 0
			}
		}
		w[int(next()*float64(n))] = 1
		for _, k := range []int{1, 2, 20, 64, 1000, n} {
			want := slices.Clone(sm.Largest(w, k))
			if got := sm.topK(w, k); !slices.Equal(got, want) {
				t.Fatalf("trial %d (n %d) k %d: %v..., want %v...", trial, n, k, got[:min(5, len(got))], want[:min(5, len(want))])
			}
		}
	}
}

// TestNucleusDrawMatchesDraw: drawing from an implicit top-p set picks what
// draw picks from the listed set with the same uniform point.
func TestNucleusDrawMatchesDraw(t *testing.T) {
	next := uniform(13)
	var sm Sampler
	for trial := range 30 {
		n := 100 + int(next()*20000)
		w := make([]float32, n)
		spread := 1 + next()*30
		for i := range w {
			w[i] = float32(math.Exp(-next() * spread))
		}
		w[int(next()*float64(n))] = 1
		var total float64
		for _, v := range w {
			total += float64(v)
		}
		topP := 0.1 + next()*0.85
		pre := vecmath.Above(w, 0, nil)
		ns := sm.nucleusCut(w, pre, topP, total)
		list := ns.members(w, pre, nil)
		for seed := range uint64(100) {
			u := rand.New(rand.NewPCG(seed, 3)).Float64()
			a := ns.draw(u, w, pre)
			b := draw(u, w, list)
			if a != b {
				t.Fatalf("trial %d seed %d: implicit set drew %d, listed set %d", trial, seed, a, b)
			}
		}
	}
}

// uniform returns a deterministic stream of uniform draws in [0, 1) from
// seed (a 64-bit LCG), for the tests' random rows.
func uniform(seed uint64) func() float64 {
	x := seed
	return func() float64 {
		x = x*6364136223846793005 + 1442695040888963407
		return float64(x>>11) / (1 << 53)
	}
}
