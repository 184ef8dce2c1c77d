package sample

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// setConstraint allows a fixed set of tokens; with masks it also offers
// them as a bitset (the Masker path), and counts Allow calls.
type setConstraint struct {
	allowed map[int32]bool
	size    int
	allows  int
}

func (c *setConstraint) Allow(t int32) bool { c.allows++; return c.allowed[t] }
func (c *setConstraint) Advance(int32)      {}

type maskConstraint struct{ *setConstraint }

func (c maskConstraint) Mask() []uint64 {
	m := make([]uint64, (c.size+63)/64)
	for t := range c.allowed {
		m[t>>6] |= 1 << (t & 63)
	}
	return m
}

// TestMaskerMatchesAllow checks that a Masker constraint, like the same
// constraint asked token by token, only ever yields allowed tokens (and
// several of them when sampling), with no Allow call on the mask path.
func TestMaskerMatchesAllow(t *testing.T) {
	const size = 1000
	rng := rand.New(rand.NewPCG(3, 4))
	row := make([]float32, size)
	for i := range row {
		row[i] = float32(rng.NormFloat64() * 3)
	}
	allowed := map[int32]bool{3: true, 64: true, 65: true, 127: true, 500: true, 999: true}
	for _, p := range []Params{
		{Temperature: 0, TopP: 1, RepetitionPenalty: 1},
		{Temperature: 1, TopP: 1, RepetitionPenalty: 1},
		{Temperature: 0.7, TopP: 0.9, TopK: 50, RepetitionPenalty: 1},
		{Temperature: 1.3, TopP: 1, MinP: 0.05, RepetitionPenalty: 1},
	} {
		plain := &setConstraint{allowed: allowed, size: size}
		masked := maskConstraint{&setConstraint{allowed: allowed, size: size}}
		pa, pm := p, p
		pa.Constraint, pm.Constraint = plain, masked
		sa, smk := NewSequence(pa, nil, 9), NewSequence(pm, nil, 9)
		var sm Sampler
		seen := map[int32]bool{}
		for range 300 {
			a, err := sm.Sample(sa, row)
			if err != nil {
				t.Fatal(err)
			}
			m, err := sm.Sample(smk, row)
			if err != nil {
				t.Fatal(err)
			}
			if !allowed[m] {
				t.Fatalf("%+v: masked sampling picked %d", p, m)
			}
			seen[m] = true
			if !allowed[a] {
				t.Fatalf("%+v: Allow sampling picked %d", p, a)
			}
		}
		if masked.allows != 0 {
			t.Errorf("%+v: %d Allow calls on the mask path", p, masked.allows)
		}
		if p.Temperature == 1 && p.TopK == 0 && len(seen) < 3 {
			t.Errorf("%+v: only %d distinct tokens drawn", p, len(seen))
		}
	}
	// Nothing allowed: ErrNoToken, not a disallowed token.
	var sm Sampler
	for _, temp := range []float64{0, 1} {
		none := maskConstraint{&setConstraint{allowed: map[int32]bool{}, size: size}}
		s := NewSequence(Params{Temperature: temp, TopP: 1, RepetitionPenalty: 1, Constraint: none}, nil, 1)
		if _, err := sm.Sample(s, row); !errors.Is(err, ErrNoToken) {
			t.Errorf("temperature %v: got %v, want ErrNoToken", temp, err)
		}
	}
}

// TestApplyMaskTail checks a bitset shorter than the row clears the rest.
func TestApplyMaskTail(t *testing.T) {
	w := make([]float32, 130)
	applyMask(w, []uint64{1 << 5})
	for i, v := range w {
		if (i == 5) != (v == 0) {
			t.Fatalf("w[%d] = %v", i, v)
		}
	}
}
