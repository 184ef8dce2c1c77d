package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// The reduced DeepSeek-V3 tokenizer.json (see testdata/PROVENANCE.md):
// the real pre_tokenizer, normalizer and decoder with a 6000-merge
// vocabulary.
var deepseek = onceTokenizer("testdata/deepseek-v3")

// pieces runs the split rules in turn, as encodeSplit does.
func pieces(rules []splitRule, s string) []string {
	if len(rules) == 0 {
		if s == "" {
			return nil
		}
		return []string{s}
	}
	var out []string
	for i := 0; i < len(s); {
		j := rules[0].next(s, i)
		if j <= i || j > len(s) {
			panic("split rule made no progress")
		}
		out = append(out, pieces(rules[1:], s[i:j])...)
		i = j
	}
	return out
}

type deepseekCase struct {
	Name    string   `json:"name"`
	Text    *string  `json:"text"`
	Hex     *string  `json:"hex"`
	Pieces  []string `json:"pieces"`
	IDs     []int32  `json:"ids"`
	IDsFull []int32  `json:"ids_full"`
}

// input is the text as Hugging Face saw it: invalid UTF-8 decoded lossily.
func (c deepseekCase) input(t *testing.T) string {
	if c.Hex != nil {
		b, err := hex.DecodeString(*c.Hex)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		return validString(string(b))
	}
	return *c.Text
}

func readDeepseekGolden(t *testing.T) (cases []deepseekCase, fullSHA string) {
	t.Helper()
	data, err := os.ReadFile("testdata/deepseek-v3/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		FullSHA256 string         `json:"full_sha256"`
		Cases      []deepseekCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) < 300 {
		t.Fatalf("golden.json has %d cases", len(g.Cases))
	}
	return g.Cases, g.FullSHA256
}

// TestDeepseekPreTokenizerFromFile checks that the file's Split patterns
// are the ones this package implements, in the file's order.
func TestDeepseekPreTokenizerFromFile(t *testing.T) {
	data, err := os.ReadFile("testdata/deepseek-v3/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		PreTokenizer struct {
			Pretokenizers []struct {
				Pattern struct{ Regex string } `json:"pattern"`
			} `json:"pretokenizers"`
		} `json:"pre_tokenizer"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range f.PreTokenizer.Pretokenizers {
		got = append(got, p.Pattern.Regex)
	}
	want := []string{deepseekDigitsPattern, deepseekCJKPattern, deepseekWordPattern, ""}
	if !slices.Equal(got, want) {
		t.Fatalf("patterns = %q, want %q", got, want)
	}
	tok := deepseek(t)
	if len(tok.splits) != 3 {
		t.Fatalf("%d split rules, want 3", len(tok.splits))
	}
}

// TestDeepseekGoldenPieces compares the pre-tokenizer's pieces with
// Hugging Face's for the whole golden set, and checks the regexp-based
// reference against the same pieces.
func TestDeepseekGoldenPieces(t *testing.T) {
	cases, _ := readDeepseekGolden(t)
	rules := deepseek(t).splits
	for _, c := range cases {
		in := c.input(t)
		if got := pieces(rules, in); !slices.Equal(got, c.Pieces) {
			t.Errorf("%s: pieces of %q\n got %q\nwant %q", c.Name, in, got, c.Pieces)
		}
		if got := referenceDeepseekPieces(in); !slices.Equal(got, c.Pieces) {
			t.Errorf("%s: reference pieces of %q\n got %q\nwant %q", c.Name, in, got, c.Pieces)
		}
	}
}

// TestDeepseekGoldenIDs encodes the golden set with the reduced tokenizer
// and decodes it back.
func TestDeepseekGoldenIDs(t *testing.T) {
	cases, _ := readDeepseekGolden(t)
	tok := deepseek(t)
	for _, c := range cases {
		in := c.input(t)
		got := tok.Encode(in)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("%s: Encode(%q)\n got %v\nwant %v", c.Name, in, got, c.IDs)
		}
		if d := tok.Decode(got); d != in {
			t.Errorf("%s: Decode = %q, want %q", c.Name, d, in)
		}
	}
}

// TestDeepseekFullGoldenIDs checks the ids of the full DeepSeek-V3
// tokenizer.json, which is not committed: it runs only when the file is
// at testdata/deepseek-v3/full/tokenizer.json (PROVENANCE.md says where to
// get it).
func TestDeepseekFullGoldenIDs(t *testing.T) {
	path := filepath.Join("testdata", "deepseek-v3", "full", "tokenizer.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s is absent", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	cases, wantSHA := readDeepseekGolden(t)
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != wantSHA {
		t.Fatalf("%s: sha256 %x, want %s", path, sum, wantSHA)
	}
	tok, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		in := c.input(t)
		got := tok.Encode(in)
		if !slices.Equal(got, c.IDsFull) {
			t.Errorf("%s: Encode(%q)\n got %v\nwant %v", c.Name, in, got, c.IDsFull)
		}
		if d := tok.Decode(got); d != in {
			t.Errorf("%s: Decode = %q, want %q", c.Name, d, in)
		}
	}
}

func TestDeepseekSplitRules(t *testing.T) {
	digits, _ := newSplitter(deepseekDigitsPattern)
	cjk, _ := newSplitter(deepseekCJKPattern)
	word, _ := newSplitter(deepseekWordPattern)
	for _, c := range []struct {
		name string
		rule splitRule
		in   string
		want []string
	}{
		{"digits in threes", digits, "1234567", []string{"123", "456", "7"}},
		{"digits between text", digits, "ab12 c3456d", []string{"ab", "12", " c", "345", "6", "d"}},
		{"unicode numbers", digits, "٣٤٥٦½²x", []string{"٣٤٥", "٦½²", "x"}},
		{"no digits", digits, "hello", []string{"hello"}},
		{"cjk run", cjk, "ab東京・大阪cd", []string{"ab", "東京・大阪", "cd"}},
		{"cjk range edges", cjk, "\u4dff\u4e00\u9fa5\u9fa6\u303f\u3040\u30ff\u3100", []string{"\u4dff", "\u4e00\u9fa5", "\u9fa6\u303f", "\u3040\u30ff", "\u3100"}},
		{"ascii punct before ascii letters", word, ".Foo x.y _bar", []string{".Foo", " x", ".y", " _", "bar"}},
		{"ascii punct before other letters", word, ".éa", []string{".", "éa"}},
		{"space before letters", word, " hello  world", []string{" hello", " ", " world"}},
		{"tab and nbsp before letters", word, "\tx\u00a0y", []string{"\tx", "\u00a0y"}},
		{"newline is no prefix", word, "\nx", []string{"\n", "x"}},
		{"number prefix", word, "1abc", []string{"1abc"}},
		{"format prefix", word, "ab\u200dcd", []string{"ab", "\u200dcd"}},
		{"mark run", word, "\u0301\u0301a", []string{"\u0301\u0301a"}},
		{"lone numbers are gaps", word, "12 34", []string{"12", " ", "34"}},
		{"gap run", word, "\x00\x01 x", []string{"\x00\x01", " x"}},
		{"punct run with newlines", word, "!!\n\nx", []string{"!!\n\n", "x"}},
		{"space then punct", word, " ...x", []string{" ...", "x"}},
		{"two spaces then punct", word, "  ...", []string{" ", " ..."}},
		{"spaces before newline", word, "a  \n  b", []string{"a", "  \n", " ", " b"}},
		{"trailing spaces", word, "a   ", []string{"a", "   "}},
		{"spaces before number", word, "a   1", []string{"a", "  ", " ", "1"}},
		{"one space before number", word, "a 1", []string{"a", " ", "1"}},
		{"symbols", word, "a€b ©", []string{"a", "€", "b", " ©"}},
	} {
		if got := pieces([]splitRule{c.rule}, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q split = %q, want %q", c.name, c.in, got, c.want)
		}
	}
	// The sequence: lookahead and runs end at the piece the earlier rules
	// left.
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"a  1", []string{"a", "  ", "1"}},
		{"x 2024年3月", []string{"x", " ", "202", "4", "年", "3", "月"}},
		{" 東京 tower", []string{" ", "東京", " tower"}},
		{"v1.2", []string{"v", "1", ".", "2"}},
	} {
		if got := pieces([]splitRule{digits, cjk, word}, c.in); !slices.Equal(got, c.want) {
			t.Errorf("sequence: %q split = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDeepseekPreTokenizerErrors(t *testing.T) {
	split := func(p, behavior string) map[string]any {
		return map[string]any{"type": "Split", "pattern": map[string]any{"Regex": p}, "behavior": behavior, "invert": false}
	}
	bl := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
	seq := func(parts ...any) map[string]any {
		return map[string]any{"type": "Sequence", "pretokenizers": parts}
	}
	for _, c := range []struct {
		name string
		pre  map[string]any
		want string
	}{
		{"only ByteLevel", seq(bl), "pretokenizers: 1 entries"},
		{"empty", seq(), "pretokenizers: 0 entries"},
		{"ByteLevel first", seq(bl, split(deepseekWordPattern, "Isolated")), `pretokenizers[0]: type "ByteLevel" is not supported`},
		{"no ByteLevel last", seq(split(deepseekDigitsPattern, "Isolated"), split(deepseekWordPattern, "Isolated")), `pretokenizers[1]: type "Split" is not supported (want ByteLevel last)`},
		{"unknown pattern", seq(split(deepseekDigitsPattern, "Isolated"), split(deepseekCJKPattern, "Isolated"), split(`\p{N}+`, "Isolated"), bl), `pretokenizers[2]: unsupported split regex "\\p{N}+"`},
		{"removed", seq(split(deepseekDigitsPattern, "Isolated"), split(deepseekCJKPattern, "Removed"), bl), `pretokenizers[1]: behavior "Removed"`},
		{"digits", seq(map[string]any{"type": "Digits", "individual_digits": false}, bl), `pretokenizers[0]: type "Digits" is not supported`},
		{"prefix space", seq(split(deepseekWordPattern, "Isolated"), map[string]any{"type": "ByteLevel", "add_prefix_space": true, "use_regex": false}), "pretokenizers[1]: ByteLevel with add_prefix_space"},
	} {
		_, err := Parse(tinyTokenizer(func(m map[string]any) { m["pre_tokenizer"] = c.pre }))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
	// Any order of known patterns loads.
	tok, err := Parse(tinyTokenizer(func(m map[string]any) {
		m["pre_tokenizer"] = seq(split(deepseekCJKPattern, "Isolated"), split(qwen2Pattern, "Isolated"), bl)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.splits) != 2 {
		t.Fatalf("%d split rules, want 2", len(tok.splits))
	}
}

// The reference splits below follow the Oniguruma patterns literally with
// Go's regexp, one alternative at a time in order, and handle the one
// lookahead, (?!\S), by giving back characters. \s is Unicode White_Space.
const refSpace = `[\t\n\v\f\r \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`

var refWordAlts = []string{
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+",
	"[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+",
	" ?[\\p{P}\\p{S}]+[\r\n]*",
	"\\s*[\r\n]+",
	"\\s+(?!\\S)",
	"\\s+",
}

var refRegexps = sync.OnceValue(func() []*regexp.Regexp {
	var res []*regexp.Regexp
	for _, a := range refWordAlts {
		a = strings.TrimSuffix(a, `(?!\S)`)
		a = strings.ReplaceAll(a, `\s`, refSpace)
		res = append(res, regexp.MustCompile(`^(?:`+a+`)`))
	}
	return append(res, regexp.MustCompile(deepseekDigitsPattern), regexp.MustCompile(deepseekCJKPattern))
})

// refIsolated splits s at the matches of re (Go regexp, leftmost-first).
func refIsolated(re *regexp.Regexp, s string) []string {
	var out []string
	last := 0
	for _, m := range re.FindAllStringIndex(s, -1) {
		if m[0] > last {
			out = append(out, s[last:m[0]])
		}
		out = append(out, s[m[0]:m[1]])
		last = m[1]
	}
	if last < len(s) {
		out = append(out, s[last:])
	}
	return out
}

// refWordMatch returns the end of deepseekWordPattern's match at s[i], or -1.
func refWordMatch(s string, i int) int {
	res := refRegexps()
	for k := range refWordAlts {
		m := res[k].FindStringIndex(s[i:])
		if m == nil {
			continue
		}
		if k != 4 {
			return i + m[1]
		}
		// \s+(?!\S): the longest whitespace run that the end of s or
		// more whitespace follows.
		for e := i + m[1]; e > i; {
			if e == len(s) || res[k].MatchString(s[e:]) {
				return e
			}
			_, n := utf8.DecodeLastRuneInString(s[:e])
			e -= n
		}
	}
	return -1
}

func refWordPieces(s string) []string {
	var out []string
	gap := -1
	for i := 0; i < len(s); {
		if e := refWordMatch(s, i); e >= 0 {
			if gap >= 0 {
				out = append(out, s[gap:i])
				gap = -1
			}
			out = append(out, s[i:e])
			i = e
			continue
		}
		if gap < 0 {
			gap = i
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
	if gap >= 0 {
		out = append(out, s[gap:])
	}
	return out
}

func referenceDeepseekPieces(s string) []string {
	res := refRegexps()
	var out []string
	for _, p1 := range refIsolated(res[len(res)-2], s) {
		for _, p2 := range refIsolated(res[len(res)-1], p1) {
			out = append(out, refWordPieces(p2)...)
		}
	}
	return out
}

func TestReferenceWordAlternatives(t *testing.T) {
	if got := strings.Join(refWordAlts, "|"); got != deepseekWordPattern {
		t.Fatalf("reference alternatives join to %q, want %q", got, deepseekWordPattern)
	}
}

// TestDeepseekMatchesReference compares the scanners with the regexp
// reference on seeded random strings over characters of every class the
// patterns tell apart.
func TestDeepseekMatchesReference(t *testing.T) {
	atoms := []string{"a", "Z", "é", "ω", "한", "ि", "\u0301", "中", "龥", "\u9fa6", "ぁ", "゠", "ー", "・", "゛", "〇",
		"0", "7", "٣", "½", "²", "Ⅻ", " ", "  ", "\t", "\n", "\r", "\u00a0", "\u3000", "\u0085", "\u000b",
		".", "'", "-", "_", "(", "|", "\\", "`", "~", "…", "。", "€", "©", "\x00", "\u200d", "\ufeff", "\ue000",
		"🤖", "\U0001F3FD", "\U00010400", "\U0001D7D8", "\U00020000"}
	splitMatchesReference(t, 1, atoms, deepseek(t).splits, referenceDeepseekPieces)
}

// FuzzDeepseekSplit compares the DeepSeek pre-tokenizer with the regexp
// reference on arbitrary text and checks that encoding round-trips.
func FuzzDeepseekSplit(f *testing.F) {
	for _, s := range []string{"", "Hello, world! 12345", "東京・大阪 ー゛", "a  1\n\n  b", "x.y()  \t\n", "ab\u200dcd", "\x00\x01 x", " ... !!\r\n", "٣٤٥٦½ e\u0301", "🤖👍🏽 \u00a0y\u3000", "a\xffb"} {
		f.Add([]byte(s))
	}
	tok := deepseek(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		s := validString(string(in))
		got, want := pieces(tok.splits, s), referenceDeepseekPieces(s)
		if !slices.Equal(got, want) {
			t.Fatalf("pieces of %q\n got %q\nwant %q", s, got, want)
		}
		if d := tok.Decode(tok.EncodeOrdinary(s)); d != s {
			t.Fatalf("Decode(EncodeOrdinary(%q)) = %q", s, d)
		}
	})
}
