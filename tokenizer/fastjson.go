package tokenizer

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The vocabulary and merges are most of a tokenizer.json (hundreds of
// thousands of short strings). These scanners read them several times
// faster than encoding/json; on anything unexpected they give up and the
// caller falls back to encoding/json, which also words the error.

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) byte(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a JSON string.
func (s *scanner) str() (string, bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	start := s.i
	escaped := false
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '\\':
			escaped = true
			j++
		case c == '"':
			s.i = j + 1
			if !escaped {
				return string(s.b[start+1 : j]), true
			}
			var out string
			if err := json.Unmarshal(s.b[start:j+1], &out); err != nil {
				return "", false
			}
			return out, true
		case c < 0x20:
			return "", false
		}
	}
	return "", false
}

// int reads a JSON integer.
func (s *scanner) int() (int64, bool) {
	s.ws()
	j := s.i
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(s.b[s.i:j]), 10, 64)
	if err != nil {
		return 0, false
	}
	s.i = j
	return n, true
}

func (s *scanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// fastVocab reads {"token": id, ...}.
func fastVocab(raw []byte) (map[string]int64, bool) {
	s := &scanner{b: raw}
	if !s.byte('{') {
		return nil, false
	}
	m := make(map[string]int64, len(raw)/16)
	if s.byte('}') {
		return m, s.end()
	}
	for {
		k, ok := s.str()
		if !ok || !s.byte(':') {
			return nil, false
		}
		v, ok := s.int()
		if !ok {
			return nil, false
		}
		m[k] = v
		if s.byte('}') {
			return m, s.end()
		}
		if !s.byte(',') {
			return nil, false
		}
	}
}

// fastMerges reads [["a", "b"], ...] or ["a b", ...]. A string rule that
// does not split into two parts is returned as one part, for the caller
// to report.
func fastMerges(raw []byte) ([][]string, bool) {
	s := &scanner{b: raw}
	if !s.byte('[') {
		return nil, false
	}
	var out [][]string
	if s.byte(']') {
		return out, s.end()
	}
	for {
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == '"' {
			l, ok := s.str()
			if !ok {
				return nil, false
			}
			out = append(out, strings.Split(l, " "))
		} else {
			if !s.byte('[') {
				return nil, false
			}
			a, ok1 := s.str()
			if !ok1 || !s.byte(',') {
				return nil, false
			}
			b, ok2 := s.str()
			if !ok2 || !s.byte(']') {
				return nil, false
			}
			out = append(out, []string{a, b})
		}
		if s.byte(']') {
			return out, s.end()
		}
		if !s.byte(',') {
			return nil, false
		}
	}
}
