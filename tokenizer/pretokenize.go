package tokenizer

import (
	"fmt"
	"sync"
	"unicode"
	"unicode/utf8"
)

// The split regexes this package implements, exactly as they appear in
// tokenizer.json files (JSON-decoded).
const (
	// qwen2Pattern is the pre-tokenizer of Qwen2, Qwen2.5, Qwen3, Qwen3-MoE,
	// Qwen3-Coder and Qwen3-Next.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen35Pattern is Qwen3.5's: combining marks count as letters.
	qwen35Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// class is the part of a rune's Unicode properties the split regexes look
// at. The categories are disjoint: White_Space characters are neither
// letters, marks nor numbers.
type class uint8

const (
	clsOther   class = iota // [^\s\p{L}\p{N}] (and \p{M} unless marks are letters)
	clsLetter               // \p{L} (and \p{M} when marks are letters)
	clsNumber               // \p{N}
	clsSpace                // \s other than \r and \n
	clsNewline              // \r or \n
)

// classify gives a rune's class; marksAreLetters selects the Qwen3.5 rule.
// \s is Unicode White_Space, which is what both Oniguruma and Go's
// unicode.IsSpace use.
func classify(r rune, marksAreLetters bool) class {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsSpace(r):
		return clsSpace
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsMark(r):
		if marksAreLetters {
			return clsLetter
		}
		return clsOther
	}
	return clsOther
}

// bmpTable caches classify over the Basic Multilingual Plane.
type bmpTable [0x10000]class

func buildTable(marksAreLetters bool) *bmpTable {
	return (*bmpTable)(bmpClasses(func(r rune) class { return classify(r, marksAreLetters) }))
}

// bmpClasses tabulates a scanner's classification over the Basic
// Multilingual Plane, the lookup its hot loop uses.
func bmpClasses[C any](classify func(rune) C) *[0x10000]C {
	t := new([0x10000]C)
	for r := range t {
		t[r] = classify(rune(r))
	}
	return t
}

// runeClasses gives a scanner's class of the rune at a position: the Basic
// Multilingual Plane from its table, the rest through classify.
type runeClasses[C any] struct {
	table    *[0x10000]C
	classify func(rune) C
}

// at returns the width and class of the rune at s[i].
func (rc runeClasses[C]) at(s string, i int) (int, C) {
	c := s[i]
	if c < utf8.RuneSelf {
		return 1, rc.table[c]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return n, rc.table[r]
	}
	return n, rc.classify(r)
}

// The two tables are built on first use and never written again.
var (
	qwen2Table  = sync.OnceValue(func() *bmpTable { return buildTable(false) })
	qwen35Table = sync.OnceValue(func() *bmpTable { return buildTable(true) })
)

// splitRule is one Split pre-tokenizer with behavior "Isolated" and
// invert false: the text is cut at the pattern's matches (leftmost-first,
// as Oniguruma finds them), and every match and every run of text between
// two matches becomes a piece of its own.
type splitRule interface {
	// next returns the end of the piece of s that starts at s[i]
	// (i < len(s)). s is the whole piece the rule splits: a pattern's
	// lookahead and runs end at its end.
	next(s string, i int) int
}

// splitter is a hand-written scanner equivalent to one of the split
// patterns above under Oniguruma's leftmost-first, backtracking semantics,
// as Hugging Face tokenizers runs it with behavior "Isolated". It covers
// the \s+(?!\S) lookahead that Go's regexp cannot express. The patterns
// match every character, so the pieces tile the input.
type splitter struct {
	marksAreLetters bool
	table           *bmpTable
}

// newSplitter returns the scanner for a known pattern, or an error naming
// the pattern.
func newSplitter(pattern string) (splitRule, error) {
	switch pattern {
	case qwen2Pattern:
		return &splitter{marksAreLetters: false, table: qwen2Table()}, nil
	case qwen35Pattern:
		return &splitter{marksAreLetters: true, table: qwen35Table()}, nil
	case deepseekDigitsPattern:
		return digitSplitter{}, nil
	case deepseekCJKPattern:
		return cjkSplitter{}, nil
	case deepseekWordPattern:
		return &deepseekSplitter{runeClasses[dsClass]{deepseekTable(), classifyDeepseek}}, nil
	}
	return nil, fmt.Errorf("unsupported split regex %q (supported: the Qwen2/Qwen3, Qwen3.5 and DeepSeek-V3 patterns)", pattern)
}

// at decodes the rune at s[i] and returns it with its width and class.
func (sp *splitter) at(s string, i int) (rune, int, class) {
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1, sp.table[c]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return r, n, sp.table[r]
	}
	return r, n, classify(r, sp.marksAreLetters)
}

// next returns the end of the piece that starts at s[i] (i < len(s)).
// The alternatives are tried in the pattern's order.
func (sp *splitter) next(s string, i int) int {
	r0, n0, k0 := sp.at(s, i)

	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' {
		if n := contraction(s[i+1:]); n > 0 {
			return i + 1 + n
		}
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+ : a letter run, optionally preceded by one
	// character that is not a newline, letter or number.
	if k0 == clsLetter {
		return sp.run(s, i+n0, clsLetter)
	}
	if k0 != clsNewline && k0 != clsNumber && i+n0 < len(s) {
		if _, _, k1 := sp.at(s, i+n0); k1 == clsLetter {
			return sp.run(s, i+n0, clsLetter)
		}
	}

	// \p{N}
	if k0 == clsNumber {
		return i + n0
	}

	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := -1
	if k0 == clsOther {
		j = i + n0
	} else if r0 == ' ' && i+1 < len(s) {
		if _, n1, k1 := sp.at(s, i+1); k1 == clsOther {
			j = i + 1 + n1
		}
	}
	if j >= 0 {
		j = sp.run(s, j, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}

	// Only whitespace is left.
	return spaceMatchEnd(s, i)
}

// spaceMatchEnd is the end of the match of \s*[\r\n]+|\s+(?!\S)|\s+ (the
// whitespace alternatives the Qwen and DeepSeek patterns share) at s[i], a
// whitespace character: it finds the whitespace run, the end of its last
// newline and the start of its last character.
func spaceMatchEnd(s string, i int) int {
	end, lastNL, last := i, -1, i
	for end < len(s) {
		r, n := rune(s[end]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRuneInString(s[end:])
		}
		if !unicode.IsSpace(r) {
			break
		}
		last = end
		end += n
		if r == '\r' || r == '\n' {
			lastNL = end
		}
	}
	switch {
	case lastNL >= 0: // \s*[\r\n]+ backtracks to the last newline
		return lastNL
	case end == len(s): // \s+(?!\S) at the end of the text
		return end
	case last > i: // \s+(?!\S) gives back the last character
		return last
	}
	return end // \s+
}

// run returns the end of the run of characters of class k starting at s[j].
func (sp *splitter) run(s string, j int, k class) int {
	for j < len(s) {
		c := s[j]
		if c < utf8.RuneSelf {
			if sp.table[c] != k {
				return j
			}
			j++
			continue
		}
		_, n, kk := sp.at(s, j)
		if kk != k {
			return j
		}
		j += n
	}
	return j
}

// contraction returns the length of the case-insensitive contraction suffix
// (s, t, re, ve, m, ll, d) at the start of s, or 0.
func contraction(s string) int {
	if len(s) == 0 {
		return 0
	}
	switch s[0] | 0x20 {
	case 's', 't', 'm', 'd':
		if isASCIILetter(s[0]) {
			return 1
		}
	case 'r', 'v', 'l':
		if !isASCIILetter(s[0]) || len(s) < 2 || !isASCIILetter(s[1]) {
			return 0
		}
		want := byte('e')
		if s[0]|0x20 == 'l' {
			want = 'l'
		}
		if s[1]|0x20 == want {
			return 2
		}
	}
	return 0
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }
