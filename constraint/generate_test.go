package constraint

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ktserve/kt/tokenizer"
)

// qwen3 is the Qwen3 tokenizer of the tokenizer package's testdata and its
// vocabulary index, loaded once.
var qwen3 = sync.OnceValues(func() (*Vocab, error) {
	tok, err := tokenizer.Load("../tokenizer/testdata")
	if err != nil {
		return nil, err
	}
	return NewVocab(tok, tok.VocabSize(), qwen3EOS)
})

var qwen3EOS = []int32{151645, 151643} // <|im_end|>, <|endoftext|>

func loadQwen3(t testing.TB) *Vocab {
	t.Helper()
	v, err := qwen3()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// distances returns each DFA state's distance in bytes to an accepting
// state, and the byte that starts a shortest path.
func distances(d *DFA) ([]int, []byte) {
	n := d.NumStates()
	dist := make([]int, n)
	next := make([]byte, n)
	for i := range dist {
		dist[i] = -1
		if d.accept[i] {
			dist[i] = 0
		}
	}
	for changed := true; changed; {
		changed = false
		for s := range n {
			for b := range 256 {
				t := d.Step(int32(s), byte(b))
				if t >= 0 && dist[t] >= 0 && (dist[s] < 0 || dist[t]+1 < dist[s]) {
					dist[s], next[s], changed = dist[t]+1, byte(b), true
				}
			}
		}
	}
	return dist, next
}

// walk generates one text under g with a random token policy: mostly a
// random allowed token, sometimes (and more often as it goes on) the byte
// token on a shortest path to a full match; EOS when allowed, half the
// time. It checks Allow agrees with the mask at every step.
func walk(t *testing.T, g *Grammar, rng *rand.Rand, byteTok [256]int32, next []byte) (string, bool) {
	c := g.NewConstraint()
	var out []byte
	for step := range 400 {
		if c.Allow(qwen3EOS[0]) && rng.IntN(2) == 0 {
			return string(out), true
		}
		var tok int32 = -1
		if rng.IntN(400) > step {
			m := g.Mask(c.State())
			start := rng.IntN(len(m))
			for k := range len(m) {
				w := m[(start+k)%len(m)]
				if w != 0 {
					bits := []int{}
					for i := range 64 {
						if w>>i&1 != 0 {
							bits = append(bits, i)
						}
					}
					tok = int32((start+k)%len(m)*64 + bits[rng.IntN(len(bits))])
					break
				}
			}
		}
		if tok < 0 {
			if g.dfa.accept[c.State()] {
				return string(out), true
			}
			tok = byteTok[next[c.State()]]
		}
		if g.vocab.isEOS(tok) {
			if !c.Allow(tok) || !c.Complete() {
				t.Fatalf("EOS in the mask of an incomplete output %q", out)
			}
			return string(out), true
		}
		if !c.Allow(tok) {
			t.Fatalf("picked token %d is not allowed after %q", tok, out)
		}
		b, _ := g.vocab.tok.TokenBytes(tok)
		out = append(out, b...)
		c.Advance(tok)
		if c.State() < 0 {
			t.Fatalf("state dead after allowed token %d (%q)", tok, out)
		}
	}
	return string(out), false
}

// TestGeneratedTextsValidate generates random texts under schemas on the
// real Qwen3 vocabulary and validates each with an independent JSON
// Schema validator.
func TestGeneratedTextsValidate(t *testing.T) {
	v := loadQwen3(t)
	var byteTok [256]int32
	for id := range int32(v.Size()) {
		if b, ok := v.tok.TokenBytes(id); ok && len(b) == 1 && !v.tok.IsSpecial(id) {
			byteTok[b[0]] = id
		}
	}
	schemas := []string{
		`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},"required":["name","age"],"additionalProperties":false}`,
		`{"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"]}},"type":"object","properties":{"path":{"type":"array","items":{"$ref":"#/$defs/pt"},"minItems":1},"closed":{"type":"boolean"},"kind":{"enum":["line","poly",null]}},"required":["path","kind"]}`,
		`{"anyOf":[{"type":"integer","exclusiveMinimum":-5,"maximum":5},{"type":"string","pattern":"^[A-Z]{2}[0-9]+$"},{"type":"null"}]}`,
		`{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"id":{"type":"string","format":"uuid"},"meta":{}},"required":["when","id","meta"]}`,
		`{"type":"object","properties":{"scores":{"type":"object","additionalProperties":{"type":"integer","minimum":0,"maximum":9}},"pair":{"type":"array","prefixItems":[{"type":"string","maxLength":3},{"type":"boolean"}],"minItems":2,"maxItems":2},"d":{"format":"date"},"u":{"type":"string","format":"uri"},"p":{"type":"number","minimum":0,"maximum":1},"t":{"type":"number","exclusiveMinimum":-40,"exclusiveMaximum":60}},"required":["scores","pair","d","u","p","t"]}`,
	}
	iters := 12
	if testing.Short() {
		iters = 4
	}
	for si, s := range schemas {
		d, err := CompileSchema([]byte(s), SchemaOptions{})
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		comp := jsonschema.NewCompiler()
		comp.AssertFormat()
		if err := comp.AddResource("s.json", doc); err != nil {
			t.Fatal(err)
		}
		sch, err := comp.Compile("s.json")
		if err != nil {
			t.Fatal(err)
		}
		g := NewGrammar(d, v)
		_, next := distances(d)
		rng := rand.New(rand.NewPCG(uint64(si), 7))
		done := 0
		for range iters {
			text, ok := walk(t, g, rng, byteTok, next)
			if !ok {
				continue
			}
			done++
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
			if err != nil {
				t.Errorf("schema %d: generated text is not JSON: %v\n%s", si, err, text)
				continue
			}
			if err := sch.Validate(inst); err != nil {
				t.Errorf("schema %d: generated text does not validate: %#v\n%q", si, err, text)
			}
			if !json.Valid([]byte(text)) {
				t.Errorf("schema %d: encoding/json refuses %q", si, text)
			}
		}
		if done < iters/2 {
			t.Errorf("schema %d: only %d of %d walks completed", si, done, iters)
		}
	}
}

// TestMaskMatchesDirect checks the trie-built masks against walking every
// token's bytes through the DFA.
func TestMaskMatchesDirect(t *testing.T) {
	v := loadQwen3(t)
	d, err := CompileSchema([]byte(`{"type":"object","properties":{"s":{"type":"string"},"n":{"type":"number"}},"required":["s","n"]}`), SchemaOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := NewGrammar(d, v)
	states := min(d.NumStates(), 12)
	if testing.Short() {
		states = 4
	}
	for s := range int32(states) {
		m := g.Mask(s)
		for id := range int32(v.Size()) {
			want := false
			if v.isEOS(id) {
				want = d.Accepting(s)
			} else if b, ok := v.tok.TokenBytes(id); ok && len(b) > 0 && !v.tok.IsSpecial(id) {
				st := s
				for _, ch := range b {
					if st = d.Step(st, ch); st < 0 {
						break
					}
				}
				want = st >= 0
			}
			if got := m[id>>6]>>(id&63)&1 != 0; got != want {
				t.Fatalf("state %d token %d: mask %v, direct %v", s, id, got, want)
			}
		}
	}
	// The EOS tokens: allowed exactly in accepting states.
	c := g.NewConstraint()
	if c.Allow(qwen3EOS[0]) {
		t.Error("EOS allowed before the object")
	}
}
