package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestSpecialTokens(t *testing.T) {
	tok := qwen3(t)
	for _, c := range []struct {
		s  string
		id int32
	}{{"<|endoftext|>", 151643}, {"<|im_start|>", 151644}, {"<|im_end|>", 151645}, {"<think>", 151667}, {"</think>", 151668}, {"Hello", 9707}, {"ĠHello", 21927}} {
		id, ok := tok.TokenID(c.s)
		if !ok || id != c.id {
			t.Errorf("TokenID(%q) = %d, %v; want %d", c.s, id, ok, c.id)
		}
	}
	if _, ok := tok.TokenID("no such token"); ok {
		t.Error("TokenID found a missing token")
	}
	if !tok.IsSpecial(151645) || tok.IsSpecial(9707) || tok.IsSpecial(-1) || tok.IsSpecial(1<<30) {
		t.Error("IsSpecial is wrong")
	}
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	if s, ok := tok.TokenString(21927); !ok || s != "ĠHello" {
		t.Errorf("TokenString(21927) = %q, %v", s, ok)
	}
	if b, ok := tok.TokenBytes(21927); !ok || string(b) != " Hello" {
		t.Errorf("TokenBytes(21927) = %q, %v", b, ok)
	}
	if _, ok := tok.TokenBytes(151900); ok {
		t.Error("TokenBytes of an id without a token")
	}
	if n := len(tok.AddedTokens()); n != 26 {
		t.Errorf("%d added tokens, want 26", n)
	}
}

func TestEncodeOrdinary(t *testing.T) {
	tok := qwen3(t)
	text := "a<|im_end|>b"
	if got := tok.Encode(text); !slices.Contains(got, 151645) {
		t.Fatalf("Encode(%q) = %v lacks <|im_end|>", text, got)
	}
	got := tok.EncodeOrdinary(text)
	if slices.Contains(got, 151645) {
		t.Fatalf("EncodeOrdinary(%q) = %v matched the special token", text, got)
	}
	if d := tok.Decode(got); d != text {
		t.Fatalf("Decode(EncodeOrdinary) = %q", d)
	}
}

func TestDecodeSkipsUnknownIDs(t *testing.T) {
	tok := qwen3(t)
	ids := []int32{9707, -5, 151900, 1 << 30, 11}
	if got := tok.Decode(ids); got != "Hello," {
		t.Fatalf("Decode = %q", got)
	}
}

// TestAppendLossy checks the replacement of ill-formed UTF-8 against the
// Unicode "maximal subpart" rule (Unicode 15 §3.9, table 3-8 examples).
func TestAppendLossy(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"},
		{"\xff", "\uFFFD"},
		{"\xe2\x82", "\uFFFD"},
		{"\xe2\x82x", "\uFFFDx"},
		{"\xf0\x9f\xa4", "\uFFFD"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xe0\x80\xaf", "\uFFFD\uFFFD\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"},
		{"é\xe4\xbd", "é\uFFFD"},
	} {
		got, n := appendLossy(nil, []byte(c.in), true)
		if string(got) != c.want || n != len(c.in) {
			t.Errorf("appendLossy(%q) = %q, %d; want %q", c.in, got, n, c.want)
		}
	}
	// Not final: a truncated sequence at the end is held back.
	got, n := appendLossy(nil, []byte("ab\xe4\xbd"), false)
	if string(got) != "ab" || n != 2 {
		t.Errorf("appendLossy(not final) = %q, %d", got, n)
	}
}

// TestStreamDecoder checks that streaming never emits broken UTF-8 and
// that its pieces add up to Decode, on text whose characters span tokens.
func TestStreamDecoder(t *testing.T) {
	tok := qwen3(t)
	texts := []string{
		"emoji 🤖👍🏽 👨‍👩‍👧‍👦 and 中文 mixed ｶﾀｶﾅ",
		"<|im_start|>assistant\n<think>\n推理</think>\n\n答案<|im_end|>",
		benchText(20000),
	}
	for _, text := range texts {
		ids := tok.Encode(text)
		for _, skip := range []bool{false, true} {
			d := tok.NewStreamDecoder(skip)
			var b strings.Builder
			for _, id := range ids {
				piece := d.Add(id)
				if !utf8.ValidString(piece) {
					t.Fatalf("Add returned invalid UTF-8 %q", piece)
				}
				b.WriteString(piece)
			}
			b.WriteString(d.Flush())
			want := tok.Decode(ids)
			if skip {
				want = tok.DecodeSkipSpecial(ids)
			}
			if b.String() != want {
				t.Fatalf("stream (skip=%v) = %q, want %q", skip, b.String(), want)
			}
		}
	}
}

// TestStreamDecoderHoldsPartialCharacter feeds a character split over
// byte tokens: nothing comes out until it is complete.
func TestStreamDecoderHoldsPartialCharacter(t *testing.T) {
	tok := qwen3(t)
	d := tok.NewStreamDecoder(false)
	rocket := "🤖" // 4 bytes, fed as 4 single-byte tokens
	for i := 0; i < 3; i++ {
		if out := d.Add(tok.model.byteIDs[rocket[i]]); out != "" {
			t.Fatalf("byte %d emitted %q", i, out)
		}
	}
	if d.Pending() != 3 {
		t.Fatalf("Pending = %d", d.Pending())
	}
	if out := d.Add(tok.model.byteIDs[rocket[3]]); out != rocket {
		t.Fatalf("last byte emitted %q", out)
	}
	d.Add(tok.model.byteIDs[0xe4])
	if out := d.Flush(); out != "\uFFFD" {
		t.Fatalf("Flush of a truncated character = %q", out)
	}
	if out := d.Flush(); out != "" {
		t.Fatalf("second Flush = %q", out)
	}
}

// TestMergeAlgorithmsAgree runs the quadratic and the heap BPE on the same
// words.
func TestMergeAlgorithmsAgree(t *testing.T) {
	tok := qwen3(t)
	r := rand.New(rand.NewPCG(3, 4))
	words := strings.Fields(benchText(50000))
	alphabet := []string{"a", "e", "th", " ", "中", "🤖", "\n", "0", "ing", "ü"}
	for range 200 {
		var b strings.Builder
		for b.Len() < 1+r.IntN(smallWord-4) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		words = append(words, b.String())
	}
	for _, w := range words {
		if len(w) < 2 || len(w) > smallWord {
			continue
		}
		small := tok.model.mergeSmall(nil, w)
		heap := tok.model.mergeHeap(nil, w)
		if !slices.Equal(small, heap) {
			t.Fatalf("%q: small %v, heap %v", w, small, heap)
		}
	}
}

// TestLongInputs checks inputs that would be quadratic without the heap:
// a long whitespace run and a long word.
func TestLongInputs(t *testing.T) {
	tok := qwen3(t)
	for _, s := range []string{strings.Repeat(" ", 20000), strings.Repeat("ab", 10000), strings.Repeat("中", 6000)} {
		ids := tok.Encode(s)
		if got := tok.Decode(ids); got != s {
			t.Fatalf("round trip of %d bytes failed", len(s))
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := qwen3(t)
	text := benchText(100000)
	want := tok.Encode(text)
	done := make(chan []int32)
	for range 4 {
		go func() { done <- tok.Encode(text) }()
	}
	for range 4 {
		if got := <-done; !slices.Equal(got, want) {
			t.Fatal("concurrent Encode differs")
		}
	}
}

// tinyTokenizer builds a small valid tokenizer.json: all 256 bytes, a few
// merges and two added tokens.
func tinyTokenizer(mut func(m map[string]any)) []byte {
	bl := newByteLevel()
	vocab := map[string]any{}
	for b := 0; b < 256; b++ {
		vocab[string(bl.toRune[b])] = b
	}
	vocab["he"], vocab["ll"], vocab["hell"], vocab["Ġw"] = 256, 257, 258, 259
	m := map[string]any{
		"version":    "1.0",
		"normalizer": map[string]any{"type": "NFC"},
		"decoder":    map[string]any{"type": "ByteLevel"},
		"added_tokens": []any{
			map[string]any{"id": 260, "content": "<|end|>", "special": true},
			map[string]any{"id": 261, "content": "[x]", "special": false, "normalized": true},
		},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen2Pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{"h e", "l l", "he ll", "Ġ w"}},
	}
	if mut != nil {
		mut(m)
	}
	data, _ := json.Marshal(m)
	return data
}

func TestTinyTokenizer(t *testing.T) {
	for _, pairs := range []bool{false, true} {
		tok, err := Parse(tinyTokenizer(func(m map[string]any) {
			if pairs {
				m["model"].(map[string]any)["merges"] = []any{[]string{"h", "e"}, []string{"l", "l"}, []string{"he", "ll"}, []string{"Ġ", "w"}}
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		got := tok.Encode("hello world<|end|>[x]")
		want := []int32{258, 'o', 259, 'o', 'r', 'l', 'd', 260, 261}
		if !slices.Equal(got, want) {
			t.Fatalf("pairs=%v: Encode = %v, want %v", pairs, got, want)
		}
		if d := tok.DecodeSkipSpecial(got); d != "hello world[x]" {
			t.Fatalf("DecodeSkipSpecial = %q", d)
		}
	}
}

// TestMalformed checks that broken or unsupported tokenizer.json files
// give an error naming the problem.
func TestMalformed(t *testing.T) {
	set := func(path string, v any) func(m map[string]any) {
		return func(m map[string]any) {
			keys := strings.Split(path, ".")
			cur := m
			for _, k := range keys[:len(keys)-1] {
				cur = cur[k].(map[string]any)
			}
			if v == nil {
				delete(cur, keys[len(keys)-1])
			} else {
				cur[keys[len(keys)-1]] = v
			}
		}
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"not json", []byte("{"), "invalid JSON"},
		{"no model", tinyTokenizer(set("model", nil)), "model: missing"},
		{"wordpiece", tinyTokenizer(set("model.type", "WordPiece")), `type "WordPiece"`},
		{"no vocab", tinyTokenizer(set("model.vocab", nil)), "vocab: missing"},
		{"vocab not object", tinyTokenizer(set("model.vocab", []int{1})), "vocab"},
		{"negative id", tinyTokenizer(func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["x"] = -1 }), "outside"},
		{"huge id", tinyTokenizer(func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["x"] = 1 << 40 }), "outside"},
		{"sparse ids", tinyTokenizer(func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["x"] = 3000000 }), "sparse"},
		{"shared id", tinyTokenizer(func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["x"] = 256 }), "share id 256"},
		{"missing byte", tinyTokenizer(func(m map[string]any) { delete(m["model"].(map[string]any)["vocab"].(map[string]any), "a") }), "byte 0x61"},
		{"merge unknown token", tinyTokenizer(set("model.merges", []any{"h zz"})), `merges[0]: token "zz"`},
		{"merge result missing", tinyTokenizer(set("model.merges", []any{"a b"})), `merged token "ab"`},
		{"merge three parts", tinyTokenizer(set("model.merges", []any{"h e l"})), "merges[0]: want 2 tokens"},
		{"merges not array", tinyTokenizer(set("model.merges", 5)), "merges"},
		{"byte fallback", tinyTokenizer(set("model.byte_fallback", true)), "byte_fallback"},
		{"nfkc", tinyTokenizer(set("normalizer", map[string]any{"type": "NFKC"})), `normalizer: type "NFKC"`},
		{"unknown regex", tinyTokenizer(func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\s+`}
		}), "unsupported split regex"},
		{"no pre_tokenizer", tinyTokenizer(set("pre_tokenizer", nil)), "pre_tokenizer: missing"},
		{"metaspace", tinyTokenizer(set("pre_tokenizer", map[string]any{"type": "Metaspace"})), `type "Metaspace"`},
		{"wrong decoder", tinyTokenizer(set("decoder", map[string]any{"type": "WordPiece"})), `decoder: type "WordPiece"`},
		{"empty added", tinyTokenizer(set("added_tokens", []any{map[string]any{"id": 5, "content": ""}})), "added_tokens[0]: empty content"},
		{"added far id", tinyTokenizer(set("added_tokens", []any{map[string]any{"id": 9999999, "content": "x"}})), "added_tokens[0]"},
		{"added twice", tinyTokenizer(set("added_tokens", []any{map[string]any{"id": 300, "content": "x"}, map[string]any{"id": 301, "content": "x"}})), "ids 300 and 301"},
	} {
		_, err := Parse(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one containing %q", c.name, err, c.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Fatalf("Load of an empty dir: %v", err)
	}
}

// FuzzEncodeDecode checks on arbitrary bytes that encoding never panics,
// gives valid ids, round-trips (valid UTF-8 comes back NFC-normalized,
// exactly as Hugging Face would) and streams to the same text.
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "你好", "a\xffb", "<|im_start|>x<|im_end|>", "e\u0301", "   \n\n\t x", "🤖👍🏽", "'s 'LL"} {
		f.Add([]byte(s))
	}
	tok := qwen3(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		ids := tok.Encode(string(in))
		for _, id := range ids {
			if id < 0 || int(id) >= tok.VocabSize() {
				t.Fatalf("id %d out of range", id)
			}
		}
		want := norm.NFC.String(validString(string(in)))
		if got := tok.Decode(ids); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", in, got, want)
		}
		if got := tok.Decode(tok.EncodeOrdinary(string(in))); got != want {
			t.Fatalf("Decode(EncodeOrdinary(%q)) = %q, want %q", in, got, want)
		}
		d := tok.NewStreamDecoder(false)
		var b bytes.Buffer
		for _, id := range ids {
			b.WriteString(d.Add(id))
		}
		b.WriteString(d.Flush())
		if b.String() != want {
			t.Fatalf("stream = %q, want %q", b.String(), want)
		}
	})
}

// FuzzParse feeds mutated tokenizer.json files to Parse: errors are fine,
// panics are not, and whatever loads must encode.
func FuzzParse(f *testing.F) {
	f.Add(tinyTokenizer(nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{},"merges":[]}}`))
	f.Add([]byte(`{"model":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data)
		if err != nil {
			return
		}
		ids := tok.Encode("hello world<|end|> 中文")
		_ = tok.Decode(ids)
		_ = fmt.Sprint(tok.VocabSize())
	})
}

func TestFastJSONMatchesEncodingJSON(t *testing.T) {
	for _, raw := range []string{`{}`, `{"a": 1, "b\u00e9\"": 2, "": 3}`, ` { "x" : -4 } `} {
		got, ok := fastVocab([]byte(raw))
		var want map[string]int64
		if err := json.Unmarshal([]byte(raw), &want); err != nil || !ok || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("fastVocab(%s) = %v, %v; want %v", raw, got, ok, want)
		}
	}
	for _, raw := range []string{`{"a": 1.5}`, `{"a": 1,}`, `{"a" 1}`, `{"a": 1} x`, `{"a": "1"}`} {
		if _, ok := fastVocab([]byte(raw)); ok {
			t.Errorf("fastVocab(%s) accepted", raw)
		}
	}
	got, ok := fastMerges([]byte(`[["a","b"], "c d", ["\u0120", "x"]]`))
	if !ok || fmt.Sprint(got) != "[[a b] [c d] [Ġ x]]" {
		t.Errorf("fastMerges = %v, %v", got, ok)
	}
	for _, raw := range []string{`[["a"]]`, `[["a","b","c"]]`, `[1]`, `[["a","b"],]`} {
		if _, ok := fastMerges([]byte(raw)); ok {
			t.Errorf("fastMerges(%s) accepted", raw)
		}
	}
}

// onceTokenizer returns a getter of the tokenizer in dir, loaded on first
// use and shared by the tests (a failed load fails each caller).
func onceTokenizer(dir string) func(testing.TB) *Tokenizer {
	load := sync.OnceValues(func() (*Tokenizer, error) { return Load(dir) })
	return func(t testing.TB) *Tokenizer {
		t.Helper()
		tok, err := load()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
}

// splitMatchesReference compares the pieces rules cut from 3000 seeded
// random strings of 1 to 24 atoms with the reference's.
func splitMatchesReference(t *testing.T, seed uint64, atoms []string, rules []splitRule, reference func(string) []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	for range 3000 {
		var b strings.Builder
		for range 1 + rng.IntN(24) {
			b.WriteString(atoms[rng.IntN(len(atoms))])
		}
		s := b.String()
		if got, want := pieces(rules, s), reference(s); !slices.Equal(got, want) {
			t.Fatalf("pieces of %q\n got %q\nwant %q", s, got, want)
		}
	}
}
