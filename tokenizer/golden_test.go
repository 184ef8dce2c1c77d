package tokenizer

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// The Qwen3 tokenizer.json (see testdata/PROVENANCE.md), loaded once.
var (
	qwen3Once = sync.OnceValues(func() (*Tokenizer, error) { return Load("testdata") })
	// qwen35 is the same vocabulary with the Qwen3.5 split regex, which is
	// what the Qwen3.5 golden file was generated with.
	// Parsing the 11 MB file again is slow under -race, so the variant
	// shares the loaded tables; TestParseQwen35Pattern checks that Parse
	// picks this splitter from the regex string.
	qwen35Once = sync.OnceValues(func() (*Tokenizer, error) {
		base, err := qwen3Once()
		if err != nil {
			return nil, err
		}
		sp, err := newSplitter(qwen35Pattern)
		if err != nil {
			return nil, err
		}
		t := *base
		t.splits, t.cache = []splitRule{sp}, newWordCache()
		return &t, nil
	})
)

func TestParseQwen35Pattern(t *testing.T) {
	for _, p := range []string{qwen2Pattern, qwen35Pattern} {
		tok, err := Parse(tinyTokenizer(func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": p}
		}))
		if err != nil {
			t.Fatal(err)
		}
		sp, ok := tok.splits[0].(*splitter)
		if len(tok.splits) != 1 || !ok || sp.marksAreLetters != (p == qwen35Pattern) {
			t.Errorf("pattern %q: splits = %#v", p, tok.splits)
		}
	}
	// In Qwen3.5 a mark after a letter stays in the word; in Qwen3 it
	// starts a new piece.
	for _, c := range []struct {
		pattern string
		want    []string
	}{{qwen2Pattern, []string{"a", "\u0301b"}}, {qwen35Pattern, []string{"a\u0301b"}}} {
		sp, _ := newSplitter(c.pattern)
		var got []string
		s := "a\u0301b"
		for i := 0; i < len(s); {
			j := sp.next(s, i)
			got = append(got, s[i:j])
			i = j
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q split = %q, want %q", c.pattern, got, c.want)
		}
	}
}

func qwen3(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := qwen3Once()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func qwen35(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := qwen35Once()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type goldenCase struct {
	Name               string  `json:"name"`
	Text               *string `json:"text"`
	Hex                *string `json:"hex"`
	IDs                []int32 `json:"ids"`
	Decoded            string  `json:"decoded"`
	DecodedSkipSpecial string  `json:"decoded_skip_special"`
}

func (c goldenCase) input(t *testing.T) string {
	if c.Hex != nil {
		b, err := hex.DecodeString(*c.Hex)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		return string(b)
	}
	return *c.Text
}

func readGolden(t *testing.T, name string) []goldenCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(g.Cases) < 100 {
		t.Fatalf("%s: only %d cases", name, len(g.Cases))
	}
	return g.Cases
}

// TestGolden compares every case of the Hugging Face reference files
// (testdata/gen/gen-ids.mjs) for both pre-tokenizer variants: ids, decoded
// text and decoded text without special tokens.
func TestGolden(t *testing.T) {
	for _, v := range []struct {
		file string
		tok  func(testing.TB) *Tokenizer
	}{{"golden_qwen3.json", qwen3}, {"golden_qwen35.json", qwen35}} {
		t.Run(v.file, func(t *testing.T) {
			tok := v.tok(t)
			for _, c := range readGolden(t, v.file) {
				in := c.input(t)
				got := tok.Encode(in)
				if !slices.Equal(got, c.IDs) {
					t.Errorf("%s: Encode(%q)\n got %v\nwant %v", c.Name, in, got, c.IDs)
					continue
				}
				if d := tok.Decode(c.IDs); d != c.Decoded {
					t.Errorf("%s: Decode = %q, want %q", c.Name, d, c.Decoded)
				}
				if d := tok.DecodeSkipSpecial(c.IDs); d != c.DecodedSkipSpecial {
					t.Errorf("%s: DecodeSkipSpecial = %q, want %q", c.Name, d, c.DecodedSkipSpecial)
				}
			}
		})
	}
}

// TestLlamaCppVectors checks llama.cpp's own Qwen test vectors. llama.cpp
// applies no NFC normalization, so for the few inputs NFC changes its ids
// differ from Hugging Face's; those cases are checked in TestGolden instead.
func TestLlamaCppVectors(t *testing.T) {
	for _, v := range []struct {
		name string
		tok  func(testing.TB) *Tokenizer
	}{{"qwen2", qwen3}, {"qwen35", qwen35}} {
		t.Run(v.name, func(t *testing.T) {
			tok := v.tok(t)
			inp, err := os.ReadFile(filepath.Join("testdata", "llamacpp", "ggml-vocab-"+v.name+".gguf.inp"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := os.ReadFile(filepath.Join("testdata", "llamacpp", "ggml-vocab-"+v.name+".gguf.out"))
			if err != nil {
				t.Fatal(err)
			}
			texts := strings.Split(string(inp), "\n__ggml_vocab_test__\n")
			texts = texts[:len(texts)-1]
			lines := strings.Split(string(out), "\n")
			lines = lines[:len(lines)-1]
			if len(texts) != len(lines) || len(texts) < 40 {
				t.Fatalf("%d inputs, %d outputs", len(texts), len(lines))
			}
			checked := 0
			for i, text := range texts {
				if !norm.NFC.IsNormalString(text) {
					continue
				}
				var want []int32
				for _, f := range strings.Fields(lines[i]) {
					n, err := strconv.Atoi(f)
					if err != nil {
						t.Fatalf("line %d: %v", i, err)
					}
					want = append(want, int32(n))
				}
				if got := tok.Encode(text); !slices.Equal(got, want) {
					t.Errorf("case %d: Encode(%q)\n got %v\nwant %v", i, text, got, want)
				}
				checked++
			}
			t.Logf("%d of %d cases checked", checked, len(texts))
		})
	}
}
