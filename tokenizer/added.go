package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// AddedToken is a token matched in the text before pre-tokenization, as in
// the added_tokens list of tokenizer.json. Special tokens (the chat control
// tokens) are dropped when decoding with skip-special.
type AddedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text the way Hugging Face's
// AddedVocabulary does: leftmost-longest matches (Aho-Corasick), then the
// single_word, lstrip and rstrip rules.
type addedMatcher struct {
	tokens []*AddedToken
	first  [256]bool
	// trie edges: key is node<<8 | byte, value the child node.
	edges    map[uint32]int32
	terminal []int32 // per node: index into tokens, or -1
}

func newAddedMatcher(tokens []*AddedToken, pattern func(*AddedToken) string) *addedMatcher {
	m := &addedMatcher{tokens: tokens, edges: map[uint32]int32{}, terminal: []int32{-1}}
	for i, tok := range tokens {
		p := pattern(tok)
		if p == "" {
			continue
		}
		m.first[p[0]] = true
		node := int32(0)
		for j := 0; j < len(p); j++ {
			k := uint32(node)<<8 | uint32(p[j])
			child, ok := m.edges[k]
			if !ok {
				child = int32(len(m.terminal))
				m.terminal = append(m.terminal, -1)
				m.edges[k] = child
			}
			node = child
		}
		if m.terminal[node] < 0 {
			m.terminal[node] = int32(i)
		}
	}
	return m
}

// longestAt returns the index of the longest token that matches at s[i:],
// and its end, or -1.
func (m *addedMatcher) longestAt(s string, i int) (tok, end int) {
	tok, end = -1, -1
	node := int32(0)
	for j := i; j < len(s); j++ {
		child, ok := m.edges[uint32(node)<<8|uint32(s[j])]
		if !ok {
			break
		}
		node = child
		if t := m.terminal[node]; t >= 0 {
			tok, end = int(t), j+1
		}
	}
	return tok, end
}

// split calls fn for each part of s in order: runs of ordinary text with
// tok nil, and matched added tokens (with any whitespace stripped by
// lstrip/rstrip) with tok set. Special tokens are left in the text when
// skipSpecial is set.
func (m *addedMatcher) split(s string, skipSpecial bool, fn func(part string, tok *AddedToken)) {
	start := 0 // end of the last emitted part
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		ti, end := m.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		tok := m.tokens[ti]
		b, e := i, end
		switch {
		case skipSpecial && tok.Special:
			i = end
			continue
		case tok.SingleWord && (endsWithWord(s[:b]) || startsWithWord(s[e:])):
			i = end
			continue
		}
		if tok.LStrip {
			b = max(spaceStartAtEnd(s[:b]), start)
		}
		if tok.RStrip {
			e += spaceLenAtStart(s[e:])
		}
		if start < b {
			fn(s[start:b], nil)
		}
		fn(s[b:e], tok)
		start, i = e, e
	}
	if start < len(s) {
		fn(s[start:], nil)
	}
}

// isWordRune approximates Rust regex's Unicode \w: alphabetic, marks,
// decimal digits, connector punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r) ||
		unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}

// spaceStartAtEnd returns where the trailing whitespace of s begins.
func spaceStartAtEnd(s string) int {
	for len(s) > 0 {
		r, n := utf8.DecodeLastRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[:len(s)-n]
	}
	return len(s)
}

// spaceLenAtStart returns the length of the leading whitespace of s.
func spaceLenAtStart(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}
