package tokenizer

import (
	"sort"
	"strings"
	"sync"
	"unicode"
)

// kimiPatternAlts are the alternatives of Kimi-K2's split pattern, as
// tokenization_kimi.py writes them (tiktoken's regex syntax: && is class
// intersection, \p{Han} the Han script). The pattern is their "|"-join.
var kimiPatternAlts = []string{
	`[\p{Han}]+`,
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`\p{N}{1,3}`,
	` ?[^\s\p{L}\p{N}]+[\r\n]*`,
	`\s*[\r\n]+`,
	`\s+(?!\S)`,
	`\s+`,
}

// kimiPattern is Kimi-K2's split pattern.
var kimiPattern = strings.Join(kimiPatternAlts, "|")

// kimiClass is the set of the pattern's character classes a rune belongs
// to, one bit each.
type kimiClass uint8

const (
	kimiHan    kimiClass = 1 << iota // \p{Han} (Script=Han)
	kimiUpper                        // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
	kimiLower                        // [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
	kimiPrefix                       // [^\r\n\p{L}\p{N}]
	kimiNumber                       // \p{N}
	kimiPunct                        // [^\s\p{L}\p{N}]
	kimiSpace                        // \s (White_Space)
)

// The classes of the kinds of character the pattern tells apart.
const (
	kimiClsHan       = kimiHan                                        // Han letter
	kimiClsHanNumber = kimiHan | kimiNumber                           // Han number (〇)
	kimiClsHanOther  = kimiHan | kimiPrefix | kimiPunct               // Han radical, Han mark
	kimiClsUpper     = kimiUpper                                      // Lu, Lt
	kimiClsLower     = kimiLower                                      // Ll
	kimiClsLetter    = kimiUpper | kimiLower                          // Lm, Lo
	kimiClsMark      = kimiUpper | kimiLower | kimiPrefix | kimiPunct // M
	kimiClsNumber    = kimiNumber                                     // N
	kimiClsSpace     = kimiSpace | kimiPrefix                         // White_Space but \r, \n
	kimiClsNewline   = kimiSpace                                      // \r, \n
	kimiClsOther     = kimiPrefix | kimiPunct                         // the rest
)

// classifyKimi gives the class of r under the Unicode 16 tables tiktoken's
// regex engine uses: Go's tables (Unicode 15.0) with the characters Unicode
// 15.1 and 16.0 added or changed taken from kimiUnicode16.
func classifyKimi(r rune) kimiClass {
	if r >= kimiUnicode16[0].lo {
		i := sort.Search(len(kimiUnicode16), func(i int) bool { return kimiUnicode16[i].hi >= r })
		if i < len(kimiUnicode16) && kimiUnicode16[i].lo <= r {
			return kimiUnicode16[i].c
		}
	}
	switch {
	case r == '\r' || r == '\n':
		return kimiClsNewline
	case unicode.IsSpace(r):
		return kimiClsSpace
	case unicode.Is(unicode.Han, r):
		switch {
		case unicode.IsLetter(r):
			return kimiClsHan
		case unicode.IsNumber(r):
			return kimiClsHanNumber
		}
		return kimiClsHanOther
	case unicode.In(r, unicode.Lu, unicode.Lt):
		return kimiClsUpper
	case unicode.Is(unicode.Ll, r):
		return kimiClsLower
	case unicode.In(r, unicode.Lm, unicode.Lo):
		return kimiClsLetter
	case unicode.IsMark(r):
		return kimiClsMark
	case unicode.IsNumber(r):
		return kimiClsNumber
	}
	return kimiClsOther
}

// kimiTable caches classifyKimi over the Basic Multilingual Plane; it is
// built on first use and never written again.
var kimiTable = sync.OnceValue(func() *[0x10000]kimiClass { return bmpClasses(classifyKimi) })

// kimiSplitter is a hand-written scanner equivalent to kimiPattern under
// the leftmost-first, backtracking semantics tiktoken's fancy-regex gives
// it, lookahead included. The pattern matches every character, so the
// pieces tile the input.
type kimiSplitter struct {
	runeClasses[kimiClass]
}

func newKimiSplitter() *kimiSplitter {
	return &kimiSplitter{runeClasses[kimiClass]{kimiTable(), classifyKimi}}
}

// run returns the end of the run of runes with any bit of k from s[j].
func (sp *kimiSplitter) run(s string, j int, k kimiClass) int {
	for j < len(s) {
		n, c := sp.at(s, j)
		if c&k == 0 {
			break
		}
		j += n
	}
	return j
}

// next returns the end of the piece that starts at s[i] (i < len(s)). The
// alternatives are tried in the pattern's order.
func (sp *kimiSplitter) next(s string, i int) int {
	n0, c0 := sp.at(s, i)

	// [\p{Han}]+
	if c0&kimiHan != 0 {
		return sp.run(s, i+n0, kimiHan)
	}

	// P?U*W+C? and P?U+W*C? (P, U, W the classes of the pattern's two
	// word alternatives, C the contraction), each first with the
	// optional prefix taken, then without it: a combining mark is both a
	// prefix and a word character.
	if c0&kimiPrefix != 0 {
		if e := sp.lowerFirst(s, i+n0); e >= 0 {
			return e
		}
	}
	if e := sp.lowerFirst(s, i); e >= 0 {
		return e
	}
	if c0&kimiPrefix != 0 {
		if e := sp.upperFirst(s, i+n0); e >= 0 {
			return e
		}
	}
	if e := sp.upperFirst(s, i); e >= 0 {
		return e
	}

	// \p{N}{1,3}
	if c0&kimiNumber != 0 {
		j := i + n0
		for k := 1; k < 3 && j < len(s); k++ {
			n, c := sp.at(s, j)
			if c&kimiNumber == 0 {
				break
			}
			j += n
		}
		return j
	}

	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := -1
	if c0&kimiPunct != 0 {
		j = i + n0
	} else if s[i] == ' ' && i+1 < len(s) {
		if n1, c1 := sp.at(s, i+1); c1&kimiPunct != 0 {
			j = i + 1 + n1
		}
	}
	if j >= 0 {
		j = sp.run(s, j, kimiPunct)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}

	// Only whitespace is left.
	return spaceMatchEnd(s, i)
}

// lowerFirst matches U*W+C? at s[j], or returns -1. U* takes the longest
// run of U; if a W follows, W+ takes the run of W from there. Otherwise
// U* gives back characters until W+ can start: at the last character of
// the run that is also in W (Lm, Lo, M), where W+ ends at once, since no
// later character of the run is in W.
func (sp *kimiSplitter) lowerFirst(s string, j int) int {
	lastW := -1 // end of the last character of the U run that is in W
	for j < len(s) {
		n, c := sp.at(s, j)
		if c&kimiUpper == 0 {
			break
		}
		j += n
		if c&kimiLower != 0 {
			lastW = j
		}
	}
	if j < len(s) {
		if n, c := sp.at(s, j); c&kimiLower != 0 {
			return kimiContraction(s, sp.run(s, j+n, kimiLower))
		}
	}
	if lastW >= 0 {
		return kimiContraction(s, lastW)
	}
	return -1
}

// upperFirst matches U+W*C? at s[j], or returns -1.
func (sp *kimiSplitter) upperFirst(s string, j int) int {
	if j >= len(s) {
		return -1
	}
	if _, c := sp.at(s, j); c&kimiUpper == 0 {
		return -1
	}
	j = sp.run(s, j, kimiUpper)
	return kimiContraction(s, sp.run(s, j, kimiLower))
}

// kimiContraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d)? at
// s[j]. The regex engine folds case by Unicode's simple case folding, under
// which s also matches ſ (U+017F); no other letter here has a non-ASCII
// fold.
func kimiContraction(s string, j int) int {
	if j+1 >= len(s) || s[j] != '\'' {
		return j
	}
	if strings.HasPrefix(s[j+1:], "ſ") {
		return j + 1 + len("ſ")
	}
	c := s[j+1] | 0x20
	if !isASCIILetter(s[j+1]) {
		return j
	}
	switch c {
	case 's', 't', 'm', 'd':
		return j + 2
	case 'r', 'v', 'l':
		want := byte('e')
		if c == 'l' {
			want = 'l'
		}
		if j+2 < len(s) && isASCIILetter(s[j+2]) && s[j+2]|0x20 == want {
			return j + 3
		}
	}
	return j
}
