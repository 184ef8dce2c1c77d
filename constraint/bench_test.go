package constraint

import (
	"math/rand/v2"
	"testing"

	"github.com/ktserve/kt/engine/sample"
)

const benchSchema = `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string"},"maxItems":5},"address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["city","zip"],"additionalProperties":false}},"required":["name","age","tags","address"],"additionalProperties":false}`

// benchStates are two states of benchSchema: between structural tokens
// (after `{"name": "Al", `, where only a key may follow) and inside a
// string (after `{"name": "Al`), where nearly every token is allowed.
func benchStates(b *testing.B) (*Grammar, map[string]int32) {
	b.Helper()
	v := loadQwen3(b)
	d, err := CompileSchema([]byte(benchSchema), SchemaOptions{})
	if err != nil {
		b.Fatal(err)
	}
	st := map[string]int32{}
	for name, prefix := range map[string]string{"structural": `{"name": "Al", `, "string": `{"name": "Al`} {
		s := d.Start()
		for i := range len(prefix) {
			s = d.Step(s, prefix[i])
		}
		if s < 0 {
			b.Fatalf("%q is not a prefix", prefix)
		}
		st[name] = s
	}
	return NewGrammar(d, v), st
}

// BenchmarkMaskCold is the cost of a state's first mask: one pass over
// the vocabulary trie.
func BenchmarkMaskCold(b *testing.B) {
	g, st := benchStates(b)
	for _, name := range []string{"structural", "string"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				g.vocab.mask(g.dfa, st[name])
			}
		})
	}
}

// BenchmarkStep is one sampling step over the 151,669-token Qwen3 row
// (random logits; temperature 1 without top-k/top-p, the sampler's whole-
// vocabulary path, or greedy): without a constraint, with the state's mask
// cached, and cold (a fresh grammar each step, nothing cached).
func BenchmarkStep(b *testing.B) {
	g, st := benchStates(b)
	rng := rand.New(rand.NewPCG(1, 2))
	row := make([]float32, g.vocab.Size())
	for i := range row {
		row[i] = float32(rng.NormFloat64() * 2)
	}
	var sm sample.Sampler
	p := sample.Params{Temperature: 1, TopP: 1, TopK: -1, RepetitionPenalty: 1}
	for _, greedy := range []bool{false, true} {
		q, mode := p, "sampled"
		if greedy {
			q.Temperature, mode = 0, "greedy"
		}
		b.Run("unconstrained/"+mode, func(b *testing.B) {
			seq := sample.NewSequence(q, nil, 1)
			for b.Loop() {
				if _, err := sm.Sample(seq, row); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, name := range []string{"structural", "string"} {
		for _, greedy := range []bool{false, true} {
			q := p
			mode := "/sampled"
			if greedy {
				q.Temperature, mode = 0, "/greedy"
			}
			b.Run(name+mode+"/cached", func(b *testing.B) {
				g.Mask(st[name])
				c := &Constraint{g: g, state: st[name]}
				q.Constraint = c
				seq := sample.NewSequence(q, nil, 1)
				for b.Loop() {
					if _, err := sm.Sample(seq, row); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+mode+"/cold", func(b *testing.B) {
				for b.Loop() {
					fresh := NewGrammar(g.dfa, g.vocab)
					q.Constraint = &Constraint{g: fresh, state: st[name]}
					seq := sample.NewSequence(q, nil, 1)
					if _, err := sm.Sample(seq, row); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCompileSchema compiles benchSchema to a DFA.
func BenchmarkCompileSchema(b *testing.B) {
	for b.Loop() {
		if _, err := CompileSchema([]byte(benchSchema), SchemaOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewVocab indexes the Qwen3 vocabulary (once per server).
func BenchmarkNewVocab(b *testing.B) {
	v := loadQwen3(b)
	for b.Loop() {
		if _, err := NewVocab(v.tok, v.size, qwen3EOS); err != nil {
			b.Fatal(err)
		}
	}
}
