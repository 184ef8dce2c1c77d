package server

import (
	"bytes"
	"encoding/json"

	"github.com/ktserve/kt/constraint"
)

// ebnfGrammar compiles an EBNF grammar (SGLang's ebnf, xgrammar's
// dialect) for param: a regular grammar to a DFA, a recursive one to an
// Earley recognizer. A grammar that does not parse or matches nothing is a
// 400 naming param.
func (s *Server) ebnfGrammar(src, param string) (*constraint.Grammar, error) {
	return s.grammarFor("ebnf\x00"+src, param, func(v *constraint.Vocab) (*constraint.Grammar, error) {
		return constraint.CompileEBNF(src, v)
	})
}

// structuralTagGrammar compiles response_format {"type":
// "structural_tag", ...} (the whole object, either form).
func (s *Server) structuralTagGrammar(raw json.RawMessage) (*constraint.Grammar, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, badRequest("response_format", "response_format is not valid JSON: %v", err)
	}
	return s.grammar("stag\x00"+buf.String(), "response_format", func() (*constraint.DFA, error) {
		return constraint.CompileStructuralTag(buf.Bytes())
	})
}

// UnmarshalJSON keeps the whole response_format object besides its type
// and json_schema.
func (r *responseFormat) UnmarshalJSON(b []byte) error {
	type plain responseFormat
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = responseFormat(p)
	r.raw = append(json.RawMessage(nil), b...)
	return nil
}

// countSet is how many of the flags are true.
func countSet(flags ...bool) int {
	n := 0
	for _, f := range flags {
		if f {
			n++
		}
	}
	return n
}

// nativeStructuralTag compiles sampling_params.structural_tag: the
// structural tag as a JSON string (SGLang's form) or an object.
func (s *Server) nativeStructuralTag(raw json.RawMessage) (*constraint.Grammar, error) {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		raw = json.RawMessage(str)
	}
	g, err := s.structuralTagGrammar(raw)
	if ae, ok := err.(*apiError); ok {
		ae.Param = "sampling_params.structural_tag"
	}
	return g, err
}
