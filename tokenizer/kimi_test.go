package tokenizer

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The Kimi-K2 test tokenizer (see testdata/PROVENANCE.md): Kimi-K2's
// pattern and special tokens over the first 10,000 ranks of o200k_base.
var kimi = onceTokenizer("testdata/kimi-k2")

type kimiCase struct {
	Name        string   `json:"name"`
	Text        *string  `json:"text"`
	Hex         *string  `json:"hex"`
	Pieces      []string `json:"pieces"`
	IDs         []int32  `json:"ids"`
	IDsOrdinary []int32  `json:"ids_ordinary"`
	IDsFull     []int32  `json:"ids_full"`
}

func (c kimiCase) input(t *testing.T) string {
	return deepseekCase{Name: c.Name, Text: c.Text, Hex: c.Hex}.input(t)
}

func readKimiGolden(t *testing.T) []kimiCase {
	t.Helper()
	data, err := os.ReadFile("testdata/kimi-k2/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []kimiCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) < 300 {
		t.Fatalf("golden.json has %d cases", len(g.Cases))
	}
	return g.Cases
}

// TestKimiGoldenIDs encodes every golden case as tiktoken did, with all
// special tokens allowed and with none, and decodes the ids back.
func TestKimiGoldenIDs(t *testing.T) {
	tok := kimi(t)
	n := 0
	for _, c := range readKimiGolden(t) {
		in := c.input(t)
		if got := tok.Encode(in); !slices.Equal(got, c.IDs) {
			t.Errorf("%s: Encode(%q)\n got %v\nwant %v", c.Name, in, got, c.IDs)
		}
		if got := tok.EncodeOrdinary(in); !slices.Equal(got, c.IDsOrdinary) {
			t.Errorf("%s: EncodeOrdinary(%q)\n got %v\nwant %v", c.Name, in, got, c.IDsOrdinary)
		}
		if d := tok.Decode(c.IDs); d != in {
			t.Errorf("%s: Decode = %q, want %q", c.Name, d, in)
		}
		if d := tok.Decode(c.IDsOrdinary); d != in {
			t.Errorf("%s: Decode(ordinary ids) = %q, want %q", c.Name, d, in)
		}
		n++
	}
	t.Logf("%d cases", n)
}

// TestKimiFullGoldenIDs checks the ids of all of o200k_base's ranks under
// Kimi-K2's pattern. The file is not committed: it runs only when
// gen/gen-kimi.mjs has written testdata/kimi-k2/full.
func TestKimiFullGoldenIDs(t *testing.T) {
	dir := filepath.Join("testdata", "kimi-k2", "full")
	if _, err := os.Stat(filepath.Join(dir, TiktokenFile)); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s is absent", dir)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range readKimiGolden(t) {
		in := c.input(t)
		if got := tok.Encode(in); !slices.Equal(got, c.IDsFull) {
			t.Errorf("%s: Encode(%q)\n got %v\nwant %v", c.Name, in, got, c.IDsFull)
		}
	}
}

// TestKimiGoldenPieces compares the scanner's pieces, and the regexp
// reference's, with tiktoken's for every golden case.
func TestKimiGoldenPieces(t *testing.T) {
	rules := []splitRule{newKimiSplitter()}
	for _, c := range readKimiGolden(t) {
		in := c.input(t)
		want := c.Pieces
		if want == nil {
			want = []string{}
		}
		if got := pieces(rules, in); !slices.Equal(got, c.Pieces) {
			t.Errorf("%s: pieces of %q\n got %q\nwant %q", c.Name, in, got, c.Pieces)
		}
		if got := referenceKimiPieces(in); !slices.Equal(got, c.Pieces) {
			t.Errorf("%s: reference pieces of %q\n got %q\nwant %q", c.Name, in, got, c.Pieces)
		}
	}
}

// kimiClassNames are the classes of classes.json.
var kimiClassNames = map[string]kimiClass{
	"han": kimiClsHan, "han_number": kimiClsHanNumber, "han_other": kimiClsHanOther,
	"upper": kimiClsUpper, "lower": kimiClsLower, "letter": kimiClsLetter, "mark": kimiClsMark,
	"number": kimiClsNumber, "space": kimiClsSpace, "other": kimiClsOther,
}

// kimiReferenceClasses returns the class of every rune as tiktoken sees it:
// classes.json from U+0080, ASCII by its fixed properties.
var kimiReferenceClasses = sync.OnceValues(func() ([]string, error) {
	data, err := os.ReadFile("testdata/kimi-k2/classes.json")
	if err != nil {
		return nil, err
	}
	var f struct {
		Ranges [][3]any `json:"ranges"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	out := make([]string, utf8.MaxRune+1)
	for r := rune(0); r < 0x80; r++ {
		switch {
		case r == '\r' || r == '\n':
			out[r] = "newline"
		case r == ' ' || (r >= '\t' && r <= '\r'):
			out[r] = "space"
		case r >= 'A' && r <= 'Z':
			out[r] = "upper"
		case r >= 'a' && r <= 'z':
			out[r] = "lower"
		case r >= '0' && r <= '9':
			out[r] = "number"
		default:
			out[r] = "other"
		}
	}
	for _, rg := range f.Ranges {
		lo, hi, name := rune(rg[0].(float64)), rune(rg[1].(float64)), rg[2].(string)
		if _, ok := kimiClassNames[name]; !ok {
			return nil, fmt.Errorf("unknown class %q", name)
		}
		for r := lo; r <= hi; r++ {
			out[r] = name
		}
	}
	for r, name := range out {
		if name == "" && (r < 0xd800 || r > 0xdfff) {
			return nil, fmt.Errorf("U+%04X has no class", r)
		}
	}
	return out, nil
})

// TestKimiClassesMatchTiktoken checks the class of every code point
// against the classes read off tiktoken, including the characters Unicode
// 15.1 and 16.0 added, which Go's tables lack.
func TestKimiClassesMatchTiktoken(t *testing.T) {
	ref, err := kimiReferenceClasses()
	if err != nil {
		t.Fatal(err)
	}
	table := kimiTable()
	bad := 0
	for r, name := range ref {
		if name == "" {
			continue
		}
		want := kimiClsNewline
		if name != "newline" {
			want = kimiClassNames[name]
		}
		got := classifyKimi(rune(r))
		if r < len(table) && table[r] != got {
			t.Fatalf("U+%04X: table %08b, classifyKimi %08b", r, table[r], got)
		}
		if got != want {
			if bad++; bad <= 20 {
				t.Errorf("U+%04X: class %08b, tiktoken's %s (%08b)", r, got, name, want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d code points differ", bad)
	}
	for i := 1; i < len(kimiUnicode16); i++ {
		if kimiUnicode16[i].lo <= kimiUnicode16[i-1].hi {
			t.Errorf("kimiUnicode16[%d] is out of order", i)
		}
	}
}

// TestKimiContractionFolding checks what kimiContraction assumes: of the
// contraction letters, only s has a case fold outside ASCII (ſ).
func TestKimiContractionFolding(t *testing.T) {
	for _, c := range "strevmld" {
		var orbit []rune
		for r := unicode.SimpleFold(c); r != c; r = unicode.SimpleFold(r) {
			orbit = append(orbit, r)
		}
		want := []rune{unicode.ToUpper(c)}
		if c == 's' {
			want = []rune{'ſ', 'S'}
			slices.Sort(orbit)
			slices.Sort(want)
		}
		if !slices.Equal(orbit, want) {
			t.Errorf("fold orbit of %q = %q, want %q", c, orbit, want)
		}
	}
}

func TestKimiSplit(t *testing.T) {
	rules := []splitRule{newKimiSplitter()}
	for _, c := range []struct {
		name, in string
		want     []string
	}{
		{"han run", "中文ab", []string{"中文", "ab"}},
		{"han radical is its own run", "x⺀⺀", []string{"x", "⺀⺀"}},
		{"han radical after punctuation", "!⺀", []string{"!⺀"}},
		{"han numeral after digits", "12〇3", []string{"12〇", "3"}},
		{"camel case", "parseHTTPResponse", []string{"parse", "HTTPResponse"}},
		{"all caps with contraction", "NASA'S it'ſ", []string{"NASA'S", " it'ſ"}},
		{"kana before capitals", "ひらがなABC", []string{"ひらがな", "ABC"}},
		{"mark before capitals", "\u0301ABC", []string{"\u0301", "ABC"}},
		{"mark after punctuation", "!\u0301a", []string{"!\u0301a"}},
		{"lone mark before newline", "\u0301\n", []string{"\u0301", "\n"}},
		{"titlecase", "ǅemal", []string{"ǅemal"}},
		{"digits in threes", "1234567", []string{"123", "456", "7"}},
		{"punctuation keeps newlines, not slashes", ".../\n/", []string{".../\n", "/"}},
		{"space then punctuation", " !!", []string{" !!"}},
		{"spaces before a word", "a   b", []string{"a", "  ", " b"}},
		{"spaces before a digit", "a  1", []string{"a", " ", " ", "1"}},
		{"newlines", "a \n\n b", []string{"a", " \n\n", " b"}},
		{"Unicode 16 capital", "\u1C89\n", []string{"\u1C89", "\n"}},
	} {
		if got := pieces(rules, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q split = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// The reference below runs Kimi-K2's pattern with Go's regexp, one
// alternative at a time in order, its character classes written out as the
// code point ranges of classes.json; the lookahead (?!\S) is handled by
// giving back characters. RE2's leftmost-first match is the one a
// backtracking engine finds first.
var kimiRefRegexps = sync.OnceValues(func() ([]*regexp.Regexp, error) {
	ref, err := kimiReferenceClasses()
	if err != nil {
		return nil, err
	}
	// class returns a character class of the runes whose reference class
	// is in names.
	class := func(negate bool, names ...string) string {
		var b strings.Builder
		b.WriteByte('[')
		if negate {
			b.WriteByte('^')
		}
		lo := -1
		for r := 0; r <= len(ref); r++ {
			in := r < len(ref) && slices.Contains(names, ref[r])
			switch {
			case in && lo < 0:
				lo = r
			case !in && lo >= 0:
				fmt.Fprintf(&b, `\x{%x}-\x{%x}`, lo, r-1)
				lo = -1
			}
		}
		b.WriteByte(']')
		return b.String()
	}
	han := class(false, "han", "han_number", "han_other")
	upper := class(false, "upper", "letter", "mark")
	lower := class(false, "lower", "letter", "mark")
	prefix := class(true, "newline", "han", "upper", "lower", "letter", "number", "han_number")
	number := class(false, "number", "han_number")
	punct := class(true, "newline", "space", "han", "upper", "lower", "letter", "number", "han_number")
	space := class(false, "newline", "space")
	contraction := `(?i:'s|'t|'re|'ve|'m|'ll|'d)?`
	alts := []string{
		han + `+`,
		prefix + `?` + upper + `*` + lower + `+` + contraction,
		prefix + `?` + upper + `+` + lower + `*` + contraction,
		number + `{1,3}`,
		` ?` + punct + `+[\r\n]*`,
		space + `*[\r\n]+`,
		space + `+`, // \s+(?!\S), the lookahead by hand
		space + `+`,
	}
	var res []*regexp.Regexp
	for _, a := range alts {
		re, err := regexp.Compile(`^(?:` + a + `)`)
		if err != nil {
			return nil, err
		}
		res = append(res, re)
	}
	return res, nil
})

func kimiRefMatch(res []*regexp.Regexp, s string, i int) int {
	for k, re := range res {
		m := re.FindStringIndex(s[i:])
		if m == nil {
			continue
		}
		if k != 6 {
			return i + m[1]
		}
		// \s+(?!\S): the longest whitespace run that the end of s or
		// more whitespace follows.
		for e := i + m[1]; e > i; {
			if e == len(s) || re.MatchString(s[e:]) {
				return e
			}
			_, n := utf8.DecodeLastRuneInString(s[:e])
			e -= n
		}
	}
	panic(fmt.Sprintf("no alternative matches %q at %d", s, i))
}

func referenceKimiPieces(s string) []string {
	res, err := kimiRefRegexps()
	if err != nil {
		panic(err)
	}
	var out []string
	for i := 0; i < len(s); {
		e := kimiRefMatch(res, s, i)
		out = append(out, s[i:e])
		i = e
	}
	return out
}

// kimiAtoms are characters of every class the pattern tells apart.
var kimiAtoms = []string{"a", "s", "S", "Z", "é", "ß", "ſ", "ǅ", "ʰ", "ª", "ω", "Я", "한", "ि", "ก", "\u0301", "\u20dd",
	"中", "々", "〇", "⺀", "\u16FF0", "の", "ー", "\U00020000", "\U0002EBF0", "\u1C89", "\u1C8A", "\U00013460", "\U00010D40",
	"0", "7", "٣", "½", "Ⅻ", " ", "  ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u0085", "\u000b", "\u001c",
	".", "'", "'s", "'S", "'ſ", "'ll", "'RE", "'t", "-", "/", "…", "。", "€", "\x00", "\u200d", "\ufeff", "\ue000",
	"🤖", "\U0001F3FD", "\U0001D7D8", "\U000323B0"}

// TestKimiMatchesReference compares the scanner with the regexp reference
// on seeded random strings.
func TestKimiMatchesReference(t *testing.T) {
	splitMatchesReference(t, 3, kimiAtoms, []splitRule{newKimiSplitter()}, referenceKimiPieces)
}

// FuzzKimiSplit compares the scanner with the regexp reference on
// arbitrary text and checks that encoding round-trips.
func FuzzKimiSplit(f *testing.F) {
	for _, s := range []string{"", "Hello, world! 12345", "中文⺀〇 ひらがなABC", "NASA'S it'ſ \u0301ABC", "a  1\n\n  b", ".../\n/ !!", "\u1C89\n\U0002EBF0", "a\xffb"} {
		f.Add([]byte(s))
	}
	tok := kimi(f)
	rules := []splitRule{newKimiSplitter()}
	f.Fuzz(func(t *testing.T, in []byte) {
		s := validString(string(in))
		if got, want := pieces(rules, s), referenceKimiPieces(s); !slices.Equal(got, want) {
			t.Fatalf("pieces of %q\n got %q\nwant %q", s, got, want)
		}
		if d := tok.Decode(tok.Encode(s)); d != s {
			t.Fatalf("Decode(Encode(%q)) = %q", s, d)
		}
	})
}

func TestKimiSpecialTokens(t *testing.T) {
	tok := kimi(t)
	const n = 10000 // the test vocabulary's ranks
	if tok.VocabSize() != n+kimiSpecialCount {
		t.Fatalf("VocabSize = %d, want %d", tok.VocabSize(), n+kimiSpecialCount)
	}
	for _, c := range []struct {
		name    string
		id      int32
		special bool // skipped by DecodeSkipSpecial, as transformers does
	}{
		{"[BOS]", n, true}, {"[EOS]", n + 1, true}, {"<|im_end|>", n + 2, true}, {"<|im_middle|>", n + 17, true},
		{"[UNK]", n + 254, true}, {"[PAD]", n + 255, true},
		{"<think>", n + 22, false}, {"<|tool_calls_section_begin|>", n + 11, false},
		{"<|reserved_token_10005|>", n + 5, false}, {"<|reserved_token_10257|>", n + 257, false},
	} {
		id, ok := tok.TokenID(c.name)
		if !ok || id != c.id {
			t.Errorf("TokenID(%q) = %d, %v; want %d", c.name, id, ok, c.id)
		}
		if got := tok.IsSpecial(c.id); got != c.special {
			t.Errorf("IsSpecial(%q) = %v, want %v", c.name, got, c.special)
		}
		if got := tok.Encode("x" + c.name + "x"); len(got) != 3 || got[1] != c.id {
			t.Errorf("Encode(x%sx) = %v, want the token between two x", c.name, got)
		}
		if got := tok.EncodeOrdinary(c.name); slices.Contains(got, c.id) || tok.Decode(got) != c.name {
			t.Errorf("EncodeOrdinary(%q) = %v, want it as text", c.name, got)
		}
		want := ""
		if !c.special {
			want = c.name
		}
		if got := tok.DecodeSkipSpecial([]int32{c.id}); got != want {
			t.Errorf("DecodeSkipSpecial(%q) = %q, want %q", c.name, got, want)
		}
	}
	if _, ok := tok.TokenID("<|reserved_token_10000|>"); ok {
		t.Error("a named id also has a reserved name")
	}
	// Model tokens are in their byte-level form, as the Python class's
	// decoder holds them.
	id, ok := tok.TokenID("Ġthe")
	if b, _ := tok.TokenBytes(id); !ok || string(b) != " the" {
		t.Errorf(`TokenID("Ġthe") = %d, %v: bytes %q`, id, ok, b)
	}
	if s, _ := tok.TokenString(id); s != "Ġthe" {
		t.Errorf("TokenString(%d) = %q", id, s)
	}
}

// TestKimiChunks checks the cuts tokenization_kimi.py's encode makes
// before tiktoken sees the text.
func TestKimiChunks(t *testing.T) {
	chunks := func(s string) []int {
		var lens []int
		kimiChunks(s, func(p string) { lens = append(lens, utf8.RuneCountInString(p)) })
		return lens
	}
	rep := strings.Repeat
	for _, c := range []struct {
		name string
		in   string
		want []int
	}{
		{"short", "hello world", []int{11}},
		{"run at the limit", rep("a", kimiMaxRun), []int{kimiMaxRun}},
		{"run past the limit", rep("a", kimiMaxRun+1), []int{kimiMaxRun, 1}},
		{"long run", rep("é", 2*kimiMaxRun+3), []int{kimiMaxRun, kimiMaxRun, 3}},
		{"text before the run stays with it", "ab " + rep("c", kimiMaxRun+2), []int{3 + kimiMaxRun, 2}},
		{"whitespace run", "x" + rep(" ", kimiMaxRun+5), []int{1 + kimiMaxRun, 5}},
		{"information separators are whitespace", rep("\x1c", kimiMaxRun+1), []int{kimiMaxRun, 1}},
		{"alternating runs", rep("ab ", kimiMaxRun), []int{3 * kimiMaxRun}},
		{"windows", rep("ab ", kimiMaxChars/3+10), []int{kimiMaxChars, 3*(kimiMaxChars/3+10) - kimiMaxChars}},
	} {
		if got := chunks(c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s: chunk lengths %v, want %v", c.name, got, c.want)
		}
	}
	// Encode encodes the chunks one by one, even where a cut splits a
	// special token, as tokenization_kimi.py does.
	tok := kimi(t)
	imEnd, _ := tok.TokenID("<|im_end|>")
	for _, s := range []string{
		"<|im_end|>" + rep("a", kimiMaxRun-5) + "<|im_end|>" + rep("b", 10),
		rep("a", kimiMaxRun-3) + "<|im_end|>",
	} {
		want := append(tok.Encode(s[:kimiMaxRun]), tok.Encode(s[kimiMaxRun:])...)
		if got := tok.Encode(s); !slices.Equal(got, want) {
			t.Errorf("Encode of a %d-character run: %d ids, want %d", len(s), len(got), len(want))
		}
		if got, want := strings.Count(s[:kimiMaxRun], "<|im_end|>")+strings.Count(s[kimiMaxRun:], "<|im_end|>"), countID(want, imEnd); got != want {
			t.Errorf("%d <|im_end|> tokens in the chunks, %d in the ids", got, want)
		}
	}
}

func countID(ids []int32, id int32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// TestKimiMergeOrder runs the quadratic, heap and run-length byte-pair
// merges on the Kimi vocabulary against tiktoken's rule written out
// directly: merge the adjacent pair whose concatenation has the lowest
// rank, the leftmost on ties.
func TestKimiMergeOrder(t *testing.T) {
	tok := kimi(t)
	rank := func(b []byte) (int32, bool) { id, ok := tok.model.wordIDs[string(b)]; return id, ok }
	tiktokenBPE := func(w string) []int32 {
		parts := make([][]byte, len(w))
		for i := 0; i < len(w); i++ {
			parts[i] = []byte(w[i : i+1])
		}
		for {
			best, bestRank := -1, int32(math.MaxInt32)
			for i := 0; i+1 < len(parts); i++ {
				if r, ok := rank(append(slices.Clip(parts[i]), parts[i+1]...)); ok && r < bestRank {
					best, bestRank = i, r
				}
			}
			if best < 0 {
				break
			}
			parts[best] = append(slices.Clip(parts[best]), parts[best+1]...)
			parts = slices.Delete(parts, best+1, best+2)
		}
		ids := make([]int32, len(parts))
		for i, p := range parts {
			ids[i], _ = rank(p)
		}
		return ids
	}
	rng := rand.New(rand.NewPCG(5, 6))
	alphabet := []string{"a", "b", "e", "n", "t", " ", "  ", "\n", "=", "-", "ab", "the", "ing", "中", "é", "0", "1"}
	// Words of long runs (the run-length path from runWord bytes), cut
	// short enough for the quadratic reference.
	var words []string
	for _, w := range runWords(9, 40) {
		words = append(words, w[:min(len(w), 600)])
	}
	for range 300 {
		var b strings.Builder
		for range 2 + rng.IntN(120) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		words = append(words, b.String())
	}
	for _, w := range words {
		if len(w) < 2 {
			continue
		}
		want := tiktokenBPE(w)
		if len(w) <= smallWord {
			if got := tok.model.mergeSmall(nil, w); !slices.Equal(got, want) {
				t.Fatalf("mergeSmall(%q) = %v, want %v", w, got, want)
			}
		}
		if got := tok.model.mergeHeap(nil, w); !slices.Equal(got, want) {
			t.Fatalf("mergeHeap(%q) = %v, want %v", w[:min(len(w), 60)], got, want)
		}
		if got, ok := tok.model.mergeRuns(nil, w); ok && !slices.Equal(got, want) {
			t.Fatalf("mergeRuns(%q) = %v, want %v", w[:min(len(w), 60)], got, want)
		}
	}
}

func writeKimiDir(t *testing.T, model string, config map[string]any, py string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, TiktokenFile), []byte(model), 0o644); err != nil {
		t.Fatal(err)
	}
	if config != nil {
		data, err := json.Marshal(config)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if py != "" {
		if err := os.WriteFile(filepath.Join(dir, kimiTokenizerPy), []byte(py), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// byteRanks is a tiktoken.model of the 256 bytes, rank = byte, with extra
// lines appended.
func byteRanks(extra ...string) string {
	var b strings.Builder
	for i := range 256 {
		fmt.Fprintf(&b, "%s %d\n", b64([]byte{byte(i)}), i)
	}
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	return b.String()
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// kimiPy is the part of tokenization_kimi.py LoadTiktoken reads.
func kimiPy() string {
	var b strings.Builder
	b.WriteString("class TikTokenTokenizer:\n    num_reserved_special_tokens = 256\n    pat_str = \"|\".join([\n")
	for _, a := range kimiPatternAlts {
		b.WriteString(`        r"""` + a + `""",` + "\n")
	}
	b.WriteString("    ])\n")
	return b.String()
}

func TestLoadTiktoken(t *testing.T) {
	autoMap := map[string]any{"AutoTokenizer": []any{"tokenization_kimi.TikTokenTokenizer", nil}}
	cfg := func(edit func(map[string]any)) map[string]any {
		m := map[string]any{"auto_map": autoMap, "additional_special_tokens": []any{}, "added_tokens_decoder": map[string]any{
			"257": map[string]any{"content": "[hi]", "special": true}}, "bos_token": "[hi]", "eos_token": "[hi]"}
		if edit != nil {
			edit(m)
		}
		return m
	}
	// A vocabulary with "ab" at rank 256 and its special tokens after it.
	dir := writeKimiDir(t, byteRanks(b64([]byte("ab"))+" 256"), cfg(nil), "")
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("ab[hi]<|reserved_token_258|>"); !slices.Equal(got, []int32{256, 257, 258}) {
		t.Errorf("Encode = %v", got)
	}
	if f := FileIn(dir); f != TiktokenFile {
		t.Errorf("FileIn = %q", f)
	}
	if _, err := Load(writeKimiDir(t, byteRanks(), cfg(func(m map[string]any) { delete(m, "auto_map") }), kimiPy())); err != nil {
		t.Errorf("with tokenization_kimi.py and no auto_map: %v", err)
	}
	if _, err := Load(writeKimiDir(t, strings.ReplaceAll(byteRanks(), "\n", "\r\n")+"\n\n", cfg(nil), "")); err != nil {
		t.Errorf("CRLF lines and blank lines: %v", err)
	}

	sparse := writeKimiDir(t, "", cfg(nil), "")
	if err := os.Truncate(filepath.Join(sparse, TiktokenFile), maxFileSize+1); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(byteRanks()), "\n")
	for _, c := range []struct {
		name string
		dir  string
		want string
	}{
		{"bad base64", writeKimiDir(t, byteRanks("!!!! 256"), cfg(nil), ""), `line 257: token "!!!!" is not base64`},
		{"missing rank", writeKimiDir(t, byteRanks(b64([]byte("ab"))), cfg(nil), ""), "line 257: want"},
		{"bad rank", writeKimiDir(t, byteRanks(b64([]byte("ab"))+" x"), cfg(nil), ""), `line 257: rank "x" is not an integer`},
		{"missing byte", writeKimiDir(t, b64([]byte("ab"))+" 0\n"+strings.Join(lines[1:], "\n"), cfg(nil), ""), "no token for byte 0x00"},
		{"duplicate token", writeKimiDir(t, byteRanks(b64([]byte("a"))+" 256"), cfg(nil), ""), `line 257: token "a" is listed again (first with rank 97)`},
		{"duplicate rank", writeKimiDir(t, byteRanks(b64([]byte("ab"))+" 255"), cfg(nil), ""), `share rank 255`},
		{"ranks not dense", writeKimiDir(t, byteRanks(b64([]byte("ab"))+" 300"), cfg(nil), ""), `rank 300: the ranks of 257 tokens must be 0 to 256`},
		{"too large", sparse, "larger than"},
		{"no config", writeKimiDir(t, byteRanks(), nil, ""), "tokenizer_config.json: no such file"},
		{"bad config", writeKimiDir(t, byteRanks(), map[string]any{"bos_token": 3}, ""), "tokenizer_config.json"},
		{"unknown tokenizer class", writeKimiDir(t, byteRanks(), cfg(func(m map[string]any) {
			m["auto_map"] = map[string]any{"AutoTokenizer": []any{"tokenization_other.Tok", nil}}
		}), ""), "only Kimi-K2's tiktoken tokenizer is supported"},
		{"other pattern", writeKimiDir(t, byteRanks(), cfg(nil), strings.Replace(kimiPy(), `\p{N}{1,3}`, `\p{N}+`, 1)), `tokenization_kimi.py does not have Kimi-K2's split pattern`},
		{"other reserved count", writeKimiDir(t, byteRanks(), cfg(nil), strings.Replace(kimiPy(), "= 256", "= 250", 1)), "num_reserved_special_tokens = 256"},
		{"special id out of range", writeKimiDir(t, byteRanks(), cfg(func(m map[string]any) {
			m["added_tokens_decoder"] = map[string]any{"10": map[string]any{"content": "[x]"}}
		}), ""), "id 10 (\"[x]\") is outside the special-token ids [256, 514)"},
		{"special id not a number", writeKimiDir(t, byteRanks(), cfg(func(m map[string]any) {
			m["added_tokens_decoder"] = map[string]any{"x": map[string]any{"content": "[x]"}}
		}), ""), `key "x" is not a token id`},
		{"duplicate special name", writeKimiDir(t, byteRanks(), cfg(func(m map[string]any) {
			m["added_tokens_decoder"] = map[string]any{"256": map[string]any{"content": "[hi]"}, "257": map[string]any{"content": "[hi]"}}
		}), ""), `"[hi]" is listed with ids 256 and 257`},
		{"unknown eos", writeKimiDir(t, byteRanks(), cfg(func(m map[string]any) { m["eos_token"] = "[EOS]" }), ""), `special token "[EOS]"`},
		{"unknown additional special token", writeKimiDir(t, byteRanks(), cfg(func(m map[string]any) {
			m["additional_special_tokens"] = []any{"<|im_end|>"}
		}), ""), `special token "<|im_end|>"`},
	} {
		_, err := Load(c.dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
	if _, err := Load(t.TempDir()); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "neither tokenizer.json nor tiktoken.model") {
		t.Errorf("empty dir: err = %v", err)
	}
	if f := FileIn(t.TempDir()); f != "" {
		t.Errorf("FileIn(empty dir) = %q", f)
	}
}

// BenchmarkKimiEncode encodes mixed English, Chinese and code with the
// Kimi pattern.
func BenchmarkKimiEncode(b *testing.B) {
	tok := kimi(b)
	text := strings.Repeat("The quick brown fox's HTTPServer jumps: 中文分词，東京タワー 12345!\n\tfunc main() { return nil }\n", 2000)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Encode(text)
	}
}

// FuzzParseTiktoken feeds tiktoken.model files (the 256 single bytes, then
// arbitrary lines) to the parser: it must not panic, and a file it accepts
// must give a tokenizer whose encoding of any text decodes back to it.
func FuzzParseTiktoken(f *testing.F) {
	var base strings.Builder
	for b := range 256 {
		fmt.Fprintf(&base, "%s %d\n", base64.StdEncoding.EncodeToString([]byte{byte(b)}), b)
	}
	for _, extra := range []string{"", "aGk= 256\n", "aGk= 256\r\naGkh 257", "aGk= 300\n", "aGk= 256\naGk= 257\n", "!!! 256\n", "aGk=\n", "aGk= -1\n", "aGk= 256 7\n"} {
		f.Add([]byte(extra), "hi hi! 北京 it's")
	}
	f.Fuzz(func(t *testing.T, extra []byte, text string) {
		ranks, err := parseTiktokenRanks(append([]byte(base.String()), extra...))
		if err != nil {
			return
		}
		n := len(ranks) // bos and eos: the first two reserved tokens
		cfg := &tiktokenConfig{BOS: tokenName{true, fmt.Sprintf("<|reserved_token_%d|>", n)},
			EOS: tokenName{true, fmt.Sprintf("<|reserved_token_%d|>", n+1)}, AdditionalSpecialTokens: &[]tokenName{}}
		tok, err := newTiktoken(ranks, cfg)
		if err != nil {
			t.Fatalf("ranks accepted, tokenizer refused: %v", err)
		}
		text = strings.ToValidUTF8(text, "\uFFFD")
		if got := tok.Decode(tok.EncodeOrdinary(text)); got != text {
			t.Fatalf("%q decodes to %q", text, got)
		}
	})
}
