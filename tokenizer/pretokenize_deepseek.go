package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// The split regexes of DeepSeek-V3 and DeepSeek-R1, exactly as they appear
// in tokenizer.json (JSON-decoded). The file applies them in this order,
// each to the pieces the one before left, then ByteLevel.
const (
	// deepseekDigitsPattern cuts numbers into groups of up to three.
	deepseekDigitsPattern = `\p{N}{1,3}`
	// deepseekCJKPattern isolates runs of CJK ideographs (U+4E00 to
	// U+9FA5), hiragana and katakana (U+3040 to U+30FF).
	deepseekCJKPattern = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	// deepseekWordPattern splits words, punctuation and whitespace.
	deepseekWordPattern = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+" +
		"|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+" +
		"| ?[\\p{P}\\p{S}]+[\r\n]*" +
		"|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// digitSplitter is deepseekDigitsPattern: runs of \p{N} cut into pieces of
// three from the left, the text between them left whole.
type digitSplitter struct{}

func isNumberAt(s string, i int) (bool, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return c >= '0' && c <= '9', 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return unicode.IsNumber(r), n
}

func (digitSplitter) next(s string, i int) int {
	num, n := isNumberAt(s, i)
	j := i + n
	if num {
		for k := 1; k < 3 && j < len(s); k++ {
			ok, n := isNumberAt(s, j)
			if !ok {
				break
			}
			j += n
		}
		return j
	}
	for j < len(s) {
		ok, n := isNumberAt(s, j)
		if ok {
			break
		}
		j += n
	}
	return j
}

// cjkSplitter is deepseekCJKPattern: runs of the CJK ranges and the text
// between them.
type cjkSplitter struct{}

func isCJKAt(s string, i int) (bool, int) {
	if s[i] < utf8.RuneSelf {
		return false, 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x30ff), n
}

func (cjkSplitter) next(s string, i int) int {
	in, n := isCJKAt(s, i)
	j := i + n
	for j < len(s) {
		ok, n := isCJKAt(s, j)
		if ok != in {
			break
		}
		j += n
	}
	return j
}

// dsClass is the part of a rune's Unicode properties deepseekWordPattern
// looks at. White_Space characters are neither letters, marks,
// punctuation nor symbols, so the classes are disjoint.
type dsClass uint8

const (
	dsOther   dsClass = iota // numbers, controls, format, private use, unassigned
	dsWord                   // \p{L} or \p{M}
	dsPunct                  // \p{P} or \p{S}
	dsSpace                  // \s other than \r and \n
	dsNewline                // \r or \n
)

func classifyDeepseek(r rune) dsClass {
	switch {
	case r == '\r' || r == '\n':
		return dsNewline
	case unicode.IsSpace(r):
		return dsSpace
	case unicode.IsLetter(r) || unicode.IsMark(r):
		return dsWord
	case unicode.IsPunct(r) || unicode.IsSymbol(r):
		return dsPunct
	}
	return dsOther
}

// deepseekTable caches classifyDeepseek over the Basic Multilingual Plane;
// it is built on first use and never written again.
var deepseekTable = sync.OnceValue(func() *[0x10000]dsClass { return bmpClasses(classifyDeepseek) })

// deepseekSplitter is a hand-written scanner equivalent to
// deepseekWordPattern under Oniguruma's leftmost-first, backtracking
// semantics, lookahead included. Unlike the Qwen patterns it does not match
// every character: a number, control or format character that no letter
// follows starts no match, and runs of those become pieces of their own.
type deepseekSplitter struct {
	runeClasses[dsClass]
}

// run returns the end of the run of characters of class k from s[j].
func (sp *deepseekSplitter) run(s string, j int, k dsClass) int {
	for j < len(s) {
		n, kk := sp.at(s, j)
		if kk != k {
			break
		}
		j += n
	}
	return j
}

func isASCIIPunct(c byte) bool {
	return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~')
}

// starts reports whether a match of the pattern starts at s[i].
func (sp *deepseekSplitter) starts(s string, i int) bool {
	n, k := sp.at(s, i)
	if k != dsOther {
		return true
	}
	if i+n == len(s) {
		return false
	}
	_, k1 := sp.at(s, i+n)
	return k1 == dsWord
}

func (sp *deepseekSplitter) next(s string, i int) int {
	if e := sp.match(s, i); e >= 0 {
		return e
	}
	// Text between matches: up to where the next match starts.
	n, _ := sp.at(s, i)
	j := i + n
	for j < len(s) && !sp.starts(s, j) {
		n, _ := sp.at(s, j)
		j += n
	}
	return j
}

// match returns the end of the match that starts at s[i], or -1. The
// alternatives are tried in the pattern's order.
func (sp *deepseekSplitter) match(s string, i int) int {
	c := s[i]
	// [ASCII punctuation][A-Za-z]+
	if isASCIIPunct(c) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 2
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j
	}

	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ : a run of letters and marks,
	// optionally preceded by one character that is not a newline,
	// letter, punctuation or symbol. A leading mark may be either part;
	// the match ends at the same place.
	n0, k0 := sp.at(s, i)
	if k0 == dsWord {
		return sp.run(s, i+n0, dsWord)
	}
	if (k0 == dsOther || k0 == dsSpace) && i+n0 < len(s) {
		if _, k1 := sp.at(s, i+n0); k1 == dsWord {
			return sp.run(s, i+n0, dsWord)
		}
	}

	// ' ?[\p{P}\p{S}]+[\r\n]*'
	j := -1
	if k0 == dsPunct {
		j = i + n0
	} else if c == ' ' && i+1 < len(s) {
		if n1, k1 := sp.at(s, i+1); k1 == dsPunct {
			j = i + 1 + n1
		}
	}
	if j >= 0 {
		j = sp.run(s, j, dsPunct)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}

	if k0 == dsOther {
		return -1
	}
	// Only whitespace is left.
	return spaceMatchEnd(s, i)
}
