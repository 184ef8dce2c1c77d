package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/ktserve/kt/constraint"
	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/engine/sample"
)

// maxGrammars is how many compiled grammars (with their token masks) the
// server keeps for reuse by later requests with the same schema or regex.
const maxGrammars = 32

// grammars compiles and caches the server's constraints: the vocabulary
// index is built on the first constrained request, and compiled grammars
// are kept by their source (least recently used out).
type grammars struct {
	vocabOnce sync.Once
	vocab     *constraint.Vocab
	vocabErr  error

	mu    sync.Mutex
	byKey map[string]*grammarEntry
	clock uint64
}

type grammarEntry struct {
	g    *constraint.Grammar
	used uint64
}

// vocabFor returns the vocabulary index, building it once.
func (s *Server) vocabFor() (*constraint.Vocab, error) {
	gs := s.gram
	gs.vocabOnce.Do(func() {
		gs.vocab, gs.vocabErr = constraint.NewVocab(s.tok, s.eng.Info().VocabSize, s.eng.EOSTokenIDs())
	})
	return gs.vocab, gs.vocabErr
}

// grammar returns the compiled grammar for key, compiling it with compile
// on a miss. param names the request field for errors.
func (s *Server) grammar(key, param string, compile func() (*constraint.DFA, error)) (*constraint.Grammar, error) {
	return s.grammarFor(key, param, func(v *constraint.Vocab) (*constraint.Grammar, error) {
		d, err := compile()
		if err != nil {
			return nil, err
		}
		return constraint.NewGrammar(d, v), nil
	})
}

// grammarFor is grammar for constraints that bind the vocabulary
// themselves (EBNF grammars, which may be context-free).
func (s *Server) grammarFor(key, param string, compile func(v *constraint.Vocab) (*constraint.Grammar, error)) (*constraint.Grammar, error) {
	if s.tok == nil {
		return nil, badRequest(param, "output constraints need a tokenizer; this server was started with --skip-tokenizer-init")
	}
	gs := s.gram
	gs.mu.Lock()
	gs.clock++
	if e, ok := gs.byKey[key]; ok {
		e.used = gs.clock
		gs.mu.Unlock()
		return e.g, nil
	}
	gs.mu.Unlock()
	v, err := s.vocabFor()
	if err != nil {
		return nil, err
	}
	g, err := compile(v)
	if err != nil {
		return nil, badRequest(param, "%v", err)
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.byKey == nil {
		gs.byKey = map[string]*grammarEntry{}
	}
	if len(gs.byKey) >= maxGrammars {
		oldest, at := "", ^uint64(0)
		for k, e := range gs.byKey {
			if e.used < at {
				oldest, at = k, e.used
			}
		}
		delete(gs.byKey, oldest)
	}
	gs.byKey[key] = &grammarEntry{g: g, used: gs.clock}
	return g, nil
}

// schemaGrammar compiles a JSON Schema (raw JSON) for param.
func (s *Server) schemaGrammar(schema []byte, strict bool, param string) (*constraint.Grammar, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, schema); err != nil {
		return nil, badRequest(param, "the schema is not valid JSON: %v", err)
	}
	key := "schema\x00"
	if strict {
		key = "strict\x00"
	}
	return s.grammar(key+buf.String(), param, func() (*constraint.DFA, error) {
		return constraint.CompileSchema(buf.Bytes(), constraint.SchemaOptions{Strict: strict})
	})
}

// regexGrammar compiles a regex for param.
func (s *Server) regexGrammar(expr, param string) (*constraint.Grammar, error) {
	return s.grammar("regex\x00"+expr, param, func() (*constraint.DFA, error) { return constraint.CompileRegex(expr) })
}

// jsonSchemaFormat is response_format.json_schema (OpenAI).
type jsonSchemaFormat struct {
	Name        *string         `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      *bool           `json:"strict"`
}

var schemaName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// responseFormatGrammar compiles response_format {"type": "json_schema"}.
// The output is always held to the schema (SGLang's behaviour; OpenAI
// holds it only under strict); strict true adds OpenAI's strict-mode
// rules on the schema.
func (s *Server) responseFormatGrammar(raw json.RawMessage) (*constraint.Grammar, error) {
	const param = "response_format.json_schema"
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest(param, "Missing required parameter: 'response_format.json_schema'.")
	}
	var f jsonSchemaFormat
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, badRequest(param, "response_format.json_schema must be an object with name, schema and strict: %v", err)
	}
	if f.Name == nil {
		return nil, badRequest(param+".name", "Missing required parameter: 'response_format.json_schema.name'.")
	}
	if !schemaName.MatchString(*f.Name) {
		return nil, badRequest(param+".name", "response_format.json_schema.name must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -, got %q", *f.Name)
	}
	if len(f.Schema) == 0 || string(f.Schema) == "null" {
		return nil, badRequest(param+".schema", "Missing required parameter: 'response_format.json_schema.schema'.")
	}
	strict := f.Strict != nil && *f.Strict
	g, err := s.schemaGrammar(f.Schema, strict, param+".schema")
	var ae *apiError
	if strict && errors.As(err, &ae) {
		ae.Message = "Invalid schema for response_format '" + *f.Name + "': " + ae.Message
	}
	return g, err
}

// nativeGrammar compiles SGLang's sampling_params json_schema, regex,
// ebnf or structural_tag (nil when none is set).
func (s *Server) nativeGrammar(ns *nativeSampling) (*constraint.Grammar, error) {
	hasSchema := len(ns.JSONSchema) > 0 && string(ns.JSONSchema) != "null"
	switch {
	case countSet(hasSchema, ns.Regex != "", ns.EBNF != "", !isNull(ns.StructuralTag)) > 1:
		return nil, badRequest("sampling_params", "Only one of regex, json_schema, ebnf, or structural_tag can be set.")
	case ns.EBNF != "":
		return s.ebnfGrammar(ns.EBNF, "sampling_params.ebnf")
	case !isNull(ns.StructuralTag):
		return s.nativeStructuralTag(ns.StructuralTag)
	case ns.Regex != "":
		return s.regexGrammar(ns.Regex, "sampling_params.regex")
	case hasSchema:
		// SGLang takes the schema as a JSON string; an object is accepted too.
		schema := []byte(ns.JSONSchema)
		var str string
		if json.Unmarshal(ns.JSONSchema, &str) == nil {
			schema = []byte(str)
		}
		return s.schemaGrammar(schema, false, "sampling_params.json_schema")
	}
	return nil, nil
}

// thinkFirst lets a reasoning model think before its constrained answer,
// as SGLang does under --reasoning-parser: an optional <think> ... </think>
// block is free text, and the constraint holds from the end of the block
// (after up to maxThinkGap whitespace-only tokens) on. The sequence cannot
// end inside the block.
type thinkFirst struct {
	inner       engine.Constraint
	tok         Tokenizer
	open, close int32
	eos         []int32
	phase       int // thinkMayOpen, thinkIn, thinkGap, thinkDone
	gap         int
}

const (
	thinkMayOpen = iota // at the start: <think> or the answer
	thinkIn             // inside the block
	thinkGap            // after </think>: whitespace or the answer
	thinkDone           // the answer has begun
)

// maxThinkGap bounds the whitespace tokens between </think> and the answer.
const maxThinkGap = 4

// withThinking wraps c for a reasoning model when the request has a
// reasoning format f and the tokenizer has single tokens for its block
// markers; prompt is the rendered prompt (it may have closed the block).
func (s *Server) withThinking(c engine.Constraint, f *reasoningFormat, prompt string) engine.Constraint {
	if f == nil || s.tok == nil {
		return c
	}
	open, close := s.tok.Encode(f.open), s.tok.Encode(f.close)
	if len(open) != 1 || len(close) != 1 {
		return c
	}
	if strings.HasSuffix(strings.TrimRight(prompt, " \n"), f.close) {
		return c // the template closed the block (thinking off)
	}
	t := &thinkFirst{inner: c, tok: s.tok, open: open[0], close: close[0], eos: s.eng.EOSTokenIDs()}
	if f.forced {
		t.phase = thinkIn
	}
	return t
}

func (t *thinkFirst) whitespace(tok int32) bool {
	b, ok := t.tok.TokenBytes(tok)
	if !ok || len(b) == 0 || t.tok.IsSpecial(tok) {
		return false
	}
	return strings.Trim(string(b), " \n\t\r") == ""
}

// Allow reports whether tok may come next.
func (t *thinkFirst) Allow(tok int32) bool {
	switch t.phase {
	case thinkIn:
		return !slices.Contains(t.eos, tok) // the answer must follow
	case thinkMayOpen:
		return tok == t.open || t.inner.Allow(tok)
	case thinkGap:
		return t.gap < maxThinkGap && t.whitespace(tok) || t.inner.Allow(tok)
	}
	return t.inner.Allow(tok)
}

// Mask gives the inner constraint's mask once the answer is under way
// (nil before: the sampler asks Allow).
func (t *thinkFirst) Mask() []uint64 {
	if m, ok := t.inner.(sample.Masker); ok && t.phase == thinkDone {
		return m.Mask()
	}
	return nil
}

// Advance records tok.
func (t *thinkFirst) Advance(tok int32) {
	switch t.phase {
	case thinkMayOpen:
		if tok == t.open {
			t.phase = thinkIn
			return
		}
	case thinkIn:
		if tok == t.close {
			t.phase = thinkGap
		}
		return
	case thinkGap:
		if t.gap < maxThinkGap && t.whitespace(tok) && !t.inner.Allow(tok) {
			t.gap++
			return
		}
	}
	t.phase = thinkDone
	t.inner.Advance(tok)
}

// routeGrammar compiles the constraint of an OpenAI-route request: its
// response_format, and SGLang's regex, ebnf and (on /v1/completions)
// json_schema fields, of which at most one may be set. jsonObject reports
// response_format json_object (the constraint/jsonobject automaton).
func (s *Server) routeGrammar(sf *samplingFields, rf *responseFormat, schema json.RawMessage) (g *constraint.Grammar, jsonObject bool, err error) {
	set := 0
	if sf.Regex != "" {
		set++
	}
	if sf.EBNF != "" {
		set++
	}
	hasSchema := len(schema) > 0 && string(schema) != "null"
	if hasSchema {
		set++
	}
	if rf != nil && rf.Type != "" && rf.Type != "text" {
		set++
	}
	if set > 1 {
		return nil, false, badRequest("response_format", "Only one of regex, json_schema, or ebnf can be set.")
	}
	switch {
	case sf.EBNF != "":
		g, err = s.ebnfGrammar(sf.EBNF, "ebnf")
		return g, false, err
	case sf.Regex != "":
		g, err = s.regexGrammar(sf.Regex, "regex")
		return g, false, err
	case hasSchema:
		str := ""
		if json.Unmarshal(schema, &str) == nil {
			schema = json.RawMessage(str)
		}
		g, err = s.schemaGrammar(schema, false, "json_schema")
		return g, false, err
	case rf == nil:
		return nil, false, nil
	}
	switch rf.Type {
	case "text", "":
		return nil, false, nil
	case "json_object":
		if s.tok == nil {
			return nil, false, badRequest("response_format", "output constraints need a tokenizer; this server was started with --skip-tokenizer-init")
		}
		return nil, true, nil
	case "json_schema":
		g, err = s.responseFormatGrammar(rf.JSONSchema)
		return g, false, err
	case "structural_tag":
		g, err = s.structuralTagGrammar(rf.raw)
		return g, false, err
	}
	return nil, false, badRequest("response_format", "response_format type must be text, json_object, json_schema or structural_tag, got %q", rf.Type)
}
