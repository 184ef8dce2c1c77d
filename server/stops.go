package server

import (
	"encoding/json"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	"github.com/ktserve/kt/engine"
)

// stopRegex is one compiled stop_regex pattern.
type stopRegex struct {
	src string // the pattern as given: matched_stop reports it
	re  *regexp.Regexp
	// maxLen bounds a match in bytes; -1: unbounded (a repetition without
	// a maximum), so every search scans the whole output.
	maxLen int
	// anchored says the pattern has an empty-width assertion (^, $, \b,
	// ...), whose meaning depends on the text before the match: it is
	// searched over the whole output.
	anchored bool
}

// maxStopRegexLen is where a bounded pattern counts as unbounded.
const maxStopRegexLen = 1 << 16

// parseStopRegex reads stop_regex (a string, an array of strings or null)
// and compiles each pattern with Go's RE2 syntax (Python's re without
// backreferences and lookaround).
func parseStopRegex(raw json.RawMessage, field string) ([]stopRegex, error) {
	if !present(raw) {
		return nil, nil
	}
	var list []string
	var one string
	if json.Unmarshal(raw, &one) == nil {
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, badRequest(field, "field %q: expected a string or an array of strings", field)
	}
	if len(list) > maxStops {
		return nil, badRequest(field, "at most %d stop regexes, got %d", maxStops, len(list))
	}
	var out []stopRegex
	for i, src := range list {
		if src == "" {
			continue
		}
		tree, err := syntax.Parse(src, syntax.Perl)
		if err != nil {
			return nil, badRequest(field, "%s[%d] %q is not a valid regular expression (RE2 syntax): %v", field, i, src, err)
		}
		re, err := regexp.Compile(src)
		if err != nil {
			return nil, badRequest(field, "%s[%d] %q is not a valid regular expression (RE2 syntax): %v", field, i, src, err)
		}
		n, anchored := regexMaxLen(tree)
		if n > maxStopRegexLen {
			n = -1
		}
		out = append(out, stopRegex{src: src, re: re, maxLen: n, anchored: anchored})
	}
	return out, nil
}

// regexMaxLen bounds the bytes a match of re can take (-1: unbounded) and
// reports whether re holds an empty-width assertion.
func regexMaxLen(re *syntax.Regexp) (n int, anchored bool) {
	add := func(a, b int) int {
		if a < 0 || b < 0 {
			return -1
		}
		return min(a+b, maxStopRegexLen+1)
	}
	switch re.Op {
	case syntax.OpNoMatch, syntax.OpEmptyMatch:
		return 0, false
	case syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 0, true
	case syntax.OpLiteral:
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				n += utf8.UTFMax // a fold of r may be longer in UTF-8
			} else {
				n += max(utf8.RuneLen(r), 1)
			}
		}
		return n, false
	case syntax.OpCharClass:
		if len(re.Rune) == 0 {
			return 0, false
		}
		return max(utf8.RuneLen(min(re.Rune[len(re.Rune)-1], utf8.MaxRune)), 1), false
	case syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return utf8.UTFMax, false
	case syntax.OpCapture, syntax.OpQuest:
		return regexMaxLen(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		m, a := regexMaxLen(re.Sub[0])
		if m == 0 {
			return 0, a
		}
		return -1, a
	case syntax.OpRepeat:
		m, a := regexMaxLen(re.Sub[0])
		if m == 0 {
			return 0, a
		}
		if re.Max < 0 || m < 0 {
			return -1, a
		}
		return min(m*re.Max, maxStopRegexLen+1), a
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			m, a := regexMaxLen(sub)
			n, anchored = add(n, m), anchored || a
		}
		return n, anchored
	case syntax.OpAlternate:
		for _, sub := range re.Sub {
			m, a := regexMaxLen(sub)
			if m < 0 || n < 0 {
				n = -1
			} else {
				n = max(n, m)
			}
			anchored = anchored || a
		}
		return n, anchored
	}
	return -1, true // an operator this bound does not know: search it all
}

// stopMatcher finds the stop strings and stop regexes of one sequence in
// its growing output text, as SGLang's scheduler does after each token: the
// stop strings first, in the order given, then the stop regexes, in the
// order given; the first that matches ends the sequence there.
type stopMatcher struct {
	strs []string
	res  []stopRegex
	// hold is how many bytes at the end of the text could begin a stop
	// string, or the pattern text of a stop regex, that the next tokens
	// complete: they are held back from a stream until known not to be one.
	hold int
	// lit is where the pattern text of a stop regex first occurs verbatim
	// in the text (-1: nowhere yet). A stop by a regex trims the output at
	// its pattern text (see find), so a stream holds back text from there.
	lit int
	// scanned is how much of the text lit has looked at.
	scanned int
}

func newStopMatcher(strs []string, res []stopRegex) stopMatcher {
	m := stopMatcher{strs: strs, res: res, lit: -1}
	for _, x := range strs {
		m.hold = max(m.hold, len(x)-1)
	}
	for _, r := range res {
		m.hold = max(m.hold, len(r.src)-1)
	}
	return m
}

// empty reports whether there is nothing to look for.
func (m *stopMatcher) empty() bool { return len(m.strs) == 0 && len(m.res) == 0 }

// stopHit is a stop found in the output text.
type stopHit struct {
	// cut is where the output ends; keep is where it ends with
	// no_stop_trim.
	cut, keep int
	matched   string // what matched_stop reports: the stop string or the pattern as given
}

// find looks for a stop in text, which grew from before bytes (stops
// wholly inside text[:before] were looked for already). A stop string
// cuts the output where it begins (keep: where it ends). A stop regex
// leaves the output as it is, match included, except that, as SGLang's
// detokenizer trims matched_stop by its text, the output is cut where the
// pattern text itself first occurs verbatim, if it does (keep: after it).
func (m *stopMatcher) find(text string, before int) (stopHit, bool) {
	for _, x := range m.strs {
		from := max(0, before-len(x)+1)
		if i := strings.Index(text[from:], x); i >= 0 {
			return stopHit{cut: from + i, keep: from + i + len(x), matched: x}, true
		}
	}
	for _, r := range m.res {
		from := 0
		if r.maxLen >= 0 && !r.anchored {
			from = max(0, before-r.maxLen+1)
			for from > 0 && !utf8.RuneStart(text[from]) {
				from--
			}
		}
		if !r.re.MatchString(text[from:]) {
			continue
		}
		hit := stopHit{cut: len(text), keep: len(text), matched: r.src}
		if i := strings.Index(text, r.src); i >= 0 {
			hit.cut, hit.keep = i, i+len(r.src)
		}
		return hit, true
	}
	return stopHit{}, false
}

// safeEnd returns how much of text, a longer version of the text of the
// last call, a stream may send before the sequence ends: all of it but
// what could still be cut by a stop.
func (m *stopMatcher) safeEnd(text string) int {
	for _, r := range m.res {
		from := max(0, m.scanned-len(r.src)+1)
		if i := strings.Index(text[from:], r.src); i >= 0 && (m.lit < 0 || from+i < m.lit) {
			m.lit = from + i
		}
	}
	m.scanned = len(text)
	end := len(text) - m.hold
	if m.lit >= 0 {
		end = min(end, m.lit)
	}
	return max(end, 0)
}

// stopTokenSet is the set of tokens that end a sequence with p: the
// model's EOS tokens (unless ignore_eos) and p's stop tokens.
func (s *Server) stopTokenSet(p engine.SamplingParams) map[int32]bool {
	set := map[int32]bool{}
	if !p.IgnoreEOS {
		for _, t := range s.eng.EOSTokenIDs() {
			set[t] = true
		}
	}
	for _, t := range p.StopTokenIDs {
		set[t] = true
	}
	return set
}
