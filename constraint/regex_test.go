package constraint

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// goFullMatch is Go's regexp answer for a full match of expr.
func goFullMatch(t testing.TB, expr, s string) bool {
	re, err := regexp.Compile(`^(?:` + expr + `)$`)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return re.MatchString(s)
}

func TestRegexTable(t *testing.T) {
	for _, tc := range []struct {
		expr   string
		inputs []string
	}{
		{`[a-c]+é(x|yz){2}\d`, []string{"abéxyz3", "abéxyz", "aéxx0", "é", ""}},
		{`^\d{3}-\d{4}$`, []string{"555-1234", "5551234", "555-12345"}},
		{`(?i)hello`, []string{"HeLLo", "hello", "hell"}},
		{`(?i)straße`, []string{"STRASSE", "strasse", "STRAẞE", "straße"}},
		{`[^"]*`, []string{"", "abc", `a"b`, "日本語", "\x00"}},
		{`.+`, []string{"a\nb", "ab", "\U0001F600"}},
		{`(?s).+`, []string{"a\nb"}},
		{`\p{Greek}+`, []string{"αβγ", "abc"}},
		{`(true|false|null)`, []string{"true", "fals", "null"}},
		{`a|^b$`, []string{"a", "b", "ab"}},
		{`[\x{D7FF}-\x{E000}]`, []string{"\uD7FF", "\uE000"}},
		{`x*`, []string{"", "xxxx", "xy"}},
		{`\Qa.b\E`, []string{"a.b", "axb"}},
	} {
		d, err := CompileRegex(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		for _, s := range tc.inputs {
			if got, want := d.Match(s), goFullMatch(t, tc.expr, s); got != want {
				t.Errorf("%s on %q: %v, Go regexp %v", tc.expr, s, got, want)
			}
			if d.Match(s) {
				for i := range len(s) {
					if !d.Prefix(s[:i]) {
						t.Errorf("%s: prefix %q of a match is refused", tc.expr, s[:i])
					}
				}
			}
		}
	}
}

func TestRegexRefusals(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`a\bb`, "word boundaries"},
		{`a^b`, "anchors"},
		{`(?m)a$\nb`, "anchors"},
		{`a(`, "missing closing )"},
		{`[z-a]`, "invalid character class range"},
		{`a{1001}`, "invalid repeat count"},
		{`[^\x00-\x{10FFFF}]`, "matches nothing"},
	} {
		_, err := CompileRegex(tc.expr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.expr, err, tc.want)
		}
	}
	// A DFA blow-up: the classic (a|b)*a(a|b){n}.
	_, err := CompileRegex(`(a|b)*a(a|b){20}`)
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("blow-up: %v, want ErrTooLarge", err)
	}
}

func TestUTF8Sequences(t *testing.T) {
	// Every rune in a range is encoded by exactly one sequence, and no
	// sequence accepts anything else.
	for _, r := range [][2]rune{{0, 0x10FFFF}, {0x80, 0x7FF}, {0x7F, 0x80}, {0x1234, 0x2345}, {0xD000, 0xE100}, {0x10000, 0x10FFFF}} {
		var seqs [][]byteRange
		utf8Sequences(r[0], r[1], func(s []byteRange) { seqs = append(seqs, s) })
		count := 0
		for _, s := range seqs {
			n := 1
			for _, br := range s {
				n *= int(br.hi-br.lo) + 1
			}
			count += n
		}
		want := 0
		for c := r[0]; c <= r[1]; c++ {
			if !utf8.ValidRune(c) {
				continue
			}
			want++
			b := []byte(string(c))
			hits := 0
			for _, s := range seqs {
				if len(s) == len(b) {
					ok := true
					for i, br := range s {
						ok = ok && b[i] >= br.lo && b[i] <= br.hi
					}
					if ok {
						hits++
					}
				}
			}
			if hits != 1 {
				t.Fatalf("rune %U in %d sequences", c, hits)
			}
		}
		if count != want {
			t.Errorf("%U-%U: sequences cover %d byte strings, want %d", r[0], r[1], count, want)
		}
	}
}
