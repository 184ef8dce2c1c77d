package constraint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
)

// Structural tags (response_format {"type": "structural_tag"}, as SGLang
// takes them and xgrammar defines them) mix free text with constrained
// pieces. Two forms are accepted:
//
//   - the legacy one: {"structures": [{"begin", "schema", "end"}],
//     "triggers": [...]}: free text until one of the triggers, then a
//     structure whose begin starts with that trigger, its JSON Schema and its
//     end, then free text again;
//   - the format one: {"format": F} where F is one of const_string (value),
//     json_schema (json_schema), regex (pattern), grammar (a regular EBNF
//     grammar), any_text, sequence and or (elements), tag (begin, content,
//     end), triggered_tags (triggers, tags, at_least_one, stop_after_first)
//     and tags_with_separator (tags, separator, at_least_one,
//     stop_after_first).
//
// Every form is a regular language, compiled to one DFA: free text is an
// Aho-Corasick automaton with no move that completes a trigger (or, for
// any_text inside a tag, the tag's end).

// stFields lists the keys each format type takes besides "type".
var stFields = map[string][]string{
	"const_string":        {"value"},
	"json_schema":         {"json_schema"},
	"regex":               {"pattern"},
	"grammar":             {"grammar"},
	"any_text":            {},
	"sequence":            {"elements"},
	"or":                  {"elements"},
	"tag":                 {"begin", "content", "end"},
	"triggered_tags":      {"triggers", "tags", "at_least_one", "stop_after_first"},
	"tags_with_separator": {"tags", "separator", "at_least_one", "stop_after_first"},
}

// maxStructDepth bounds the nesting of formats.
const maxStructDepth = 32

type stFormat struct {
	Type           string            `json:"type"`
	Value          *string           `json:"value"`
	JSONSchema     json.RawMessage   `json:"json_schema"`
	Pattern        *string           `json:"pattern"`
	Grammar        *string           `json:"grammar"`
	Elements       []json.RawMessage `json:"elements"`
	Begin          *string           `json:"begin"`
	Content        json.RawMessage   `json:"content"`
	End            *string           `json:"end"`
	Triggers       []string          `json:"triggers"`
	Tags           []json.RawMessage `json:"tags"`
	Separator      *string           `json:"separator"`
	AtLeastOne     bool              `json:"at_least_one"`
	StopAfterFirst bool              `json:"stop_after_first"`
}

// StructTagError is a structural tag the compiler refuses, at Path (a
// dotted path from the response_format object, such as
// "format.tags[0].content").
type StructTagError struct {
	Path string
	Msg  string
}

func (e *StructTagError) Error() string {
	return fmt.Sprintf("structural_tag %s: %s", e.Path, e.Msg)
}

type stCompiler struct {
	b *builder
}

func stErr(path, format string, args ...any) error {
	return &StructTagError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// CompileStructuralTag compiles a response_format object of type
// structural_tag (either form) to a DFA over the whole output.
func CompileStructuralTag(raw []byte) (*DFA, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, stErr("response_format", "expected an object: %v", err)
	}
	c := &stCompiler{b: &builder{}}
	var f frag
	var err error
	if _, ok := top["format"]; ok {
		for k := range top {
			if k != "type" && k != "format" {
				return nil, stErr(k, "unknown field (a structural tag with format takes type and format)")
			}
		}
		f, err = c.format(top["format"], "format", 0)
	} else {
		f, err = c.legacy(top)
	}
	if err != nil {
		return nil, err
	}
	d, err := c.b.finish(f)
	if err != nil {
		return nil, stErr("response_format", "%v", err)
	}
	return d, nil
}

// legacy compiles {"structures": [...], "triggers": [...]} as
// triggered_tags of json_schema tags.
func (c *stCompiler) legacy(top map[string]json.RawMessage) (frag, error) {
	var l struct {
		Structures []struct {
			Begin  *string         `json:"begin"`
			Schema json.RawMessage `json:"schema"`
			End    *string         `json:"end"`
		} `json:"structures"`
		Triggers       []string `json:"triggers"`
		AtLeastOne     bool     `json:"at_least_one"`
		StopAfterFirst bool     `json:"stop_after_first"`
	}
	for k := range top {
		switch k {
		case "type", "structures", "triggers", "at_least_one", "stop_after_first":
		default:
			return frag{}, stErr(k, "unknown field (a structural tag takes structures and triggers, or format)")
		}
	}
	raw, _ := json.Marshal(top)
	if err := json.Unmarshal(raw, &l); err != nil {
		return frag{}, stErr("structures", "expected structures [{begin, schema, end}] and triggers [strings]: %v", err)
	}
	if len(l.Structures) == 0 {
		return frag{}, stErr("structures", "at least one structure is needed")
	}
	tags := make([]frag, len(l.Structures))
	begins := make([]string, len(l.Structures))
	for i, s := range l.Structures {
		path := fmt.Sprintf("structures[%d]", i)
		if s.Begin == nil || s.End == nil {
			return frag{}, stErr(path, "begin and end are required")
		}
		schema := s.Schema
		if len(schema) == 0 || string(schema) == "null" {
			schema = json.RawMessage(`{}`) // any JSON value, as SGLang
		}
		content, err := c.schema(schema, path+".schema")
		if err != nil {
			return frag{}, err
		}
		begins[i] = *s.Begin
		tags[i] = c.b.cat(c.b.lit(*s.Begin), content, c.b.lit(*s.End))
	}
	return c.triggered(l.Triggers, begins, tags, l.AtLeastOne, l.StopAfterFirst, "triggers", "structures")
}

// triggered is free text (no trigger in it) around tags, each of whose
// begins must start with a trigger.
func (c *stCompiler) triggered(triggers, begins []string, tags []frag, atLeastOne, stopAfterFirst bool, path, tagsPath string) (frag, error) {
	if len(triggers) == 0 {
		return frag{}, stErr(path, "at least one trigger is needed")
	}
	for i, t := range triggers {
		if t == "" {
			return frag{}, stErr(fmt.Sprintf("%s[%d]", path, i), "a trigger must not be empty")
		}
	}
	for i, b := range begins {
		if !slices.ContainsFunc(triggers, func(t string) bool { return strings.HasPrefix(b, t) }) {
			return frag{}, stErr(fmt.Sprintf("%s[%d].begin", tagsPath, i), "begin %q starts with none of the triggers %q", b, triggers)
		}
	}
	b := c.b
	trig := sortedUnique(triggers)
	free := func() frag { return b.avoiding(trig) }
	tag := b.alt(tags...)
	switch {
	case atLeastOne && stopAfterFirst:
		return b.cat(free(), tag), nil
	case stopAfterFirst:
		return b.cat(free(), b.opt(tag)), nil
	case atLeastOne:
		return b.cat(free(), b.plus(b.cat(tag, free()))), nil
	}
	// A tag's states are shared by every repetition: one alternation
	// inside a loop.
	return b.cat(free(), b.star(b.cat(tag, free()))), nil
}

// schema compiles a JSON Schema piece.
func (c *stCompiler) schema(raw json.RawMessage, path string) (frag, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return frag{}, stErr(path, "not valid JSON: %v", err)
	}
	expr, err := SchemaRegex(buf.Bytes(), SchemaOptions{})
	if err != nil {
		return frag{}, stErr(path, "%v", err)
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return frag{}, stErr(path, "the schema is too large to compile: %v", err)
	}
	return c.b.regex(re), nil
}

// format compiles one format object at path.
func (c *stCompiler) format(raw json.RawMessage, path string, depth int) (frag, error) {
	if depth > maxStructDepth {
		return frag{}, stErr(path, "formats nest deeper than %d", maxStructDepth)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil || keys == nil {
		return frag{}, stErr(path, "expected a format object with a type")
	}
	var f stFormat
	if err := json.Unmarshal(raw, &f); err != nil {
		return frag{}, stErr(path, "%v", err)
	}
	allowed, ok := stFields[f.Type]
	if !ok {
		types := make([]string, 0, len(stFields))
		for t := range stFields {
			types = append(types, t)
		}
		sort.Strings(types)
		return frag{}, stErr(path+".type", "%q is not one of %s", f.Type, strings.Join(types, ", "))
	}
	for k := range keys {
		if k != "type" && !slices.Contains(allowed, k) {
			return frag{}, stErr(path+"."+k, "unknown field for a %s format (it takes %s)", f.Type, strings.Join(allowed, ", "))
		}
	}
	b := c.b
	need := func(field string, present bool) error {
		if !present {
			return stErr(path+"."+field, "required for a %s format", f.Type)
		}
		return nil
	}
	switch f.Type {
	case "const_string":
		if err := need("value", f.Value != nil); err != nil {
			return frag{}, err
		}
		return b.lit(*f.Value), nil
	case "json_schema":
		if err := need("json_schema", len(f.JSONSchema) > 0 && string(f.JSONSchema) != "null"); err != nil {
			return frag{}, err
		}
		return c.schema(f.JSONSchema, path+".json_schema")
	case "regex":
		if err := need("pattern", f.Pattern != nil); err != nil {
			return frag{}, err
		}
		re, err := syntax.Parse(*f.Pattern, syntax.Perl)
		if err != nil {
			return frag{}, stErr(path+".pattern", "%v", err)
		}
		if re, err = stripAnchors(re); err != nil {
			return frag{}, stErr(path+".pattern", "%v", err)
		}
		return b.regex(re), nil
	case "grammar":
		if err := need("grammar", f.Grammar != nil); err != nil {
			return frag{}, err
		}
		g, err := ParseEBNF(*f.Grammar)
		if err != nil {
			return frag{}, stErr(path+".grammar", "%v", err)
		}
		if !g.Regular() {
			return frag{}, stErr(path+".grammar", "a grammar inside a structural tag must not be recursive")
		}
		return g.frag(b, g.rules["root"]), nil
	case "any_text":
		return b.star(b.anyByte()), nil
	case "sequence", "or":
		if err := need("elements", len(f.Elements) > 0); err != nil {
			return frag{}, err
		}
		fs := make([]frag, len(f.Elements))
		for i, e := range f.Elements {
			var err error
			if fs[i], err = c.format(e, fmt.Sprintf("%s.elements[%d]", path, i), depth+1); err != nil {
				return frag{}, err
			}
		}
		if f.Type == "or" {
			return b.alt(fs...), nil
		}
		return b.cat(fs...), nil
	case "tag":
		tf, _, err := c.tag(raw, path, depth)
		return tf, err
	case "triggered_tags", "tags_with_separator":
		if err := need("tags", len(f.Tags) > 0); err != nil {
			return frag{}, err
		}
		tags := make([]frag, len(f.Tags))
		begins := make([]string, len(f.Tags))
		for i, t := range f.Tags {
			var err error
			if tags[i], begins[i], err = c.tag(t, fmt.Sprintf("%s.tags[%d]", path, i), depth+1); err != nil {
				return frag{}, err
			}
		}
		if f.Type == "triggered_tags" {
			return c.triggered(f.Triggers, begins, tags, f.AtLeastOne, f.StopAfterFirst, path+".triggers", path+".tags")
		}
		if err := need("separator", f.Separator != nil); err != nil {
			return frag{}, err
		}
		tag := b.alt(tags...)
		switch {
		case f.StopAfterFirst && f.AtLeastOne:
			return tag, nil
		case f.StopAfterFirst:
			return b.opt(tag), nil
		}
		// tag (separator tag)*, one copy of the tags in a loop.
		sep := b.lit(*f.Separator)
		b.eps(tag.out, sep.in)
		b.eps(sep.out, tag.in)
		list := frag{tag.in, b.state()}
		b.eps(tag.out, list.out)
		if f.AtLeastOne {
			return list, nil
		}
		return b.opt(list), nil
	}
	return frag{}, stErr(path+".type", "unsupported format type %q", f.Type)
}

// tag compiles a tag format (begin content end) and returns its begin.
// any_text content stops at the end string (less its surrounding
// whitespace):
// it cannot contain it.
func (c *stCompiler) tag(raw json.RawMessage, path string, depth int) (frag, string, error) {
	var f stFormat
	if err := json.Unmarshal(raw, &f); err != nil {
		return frag{}, "", stErr(path, "expected a tag {begin, content, end}: %v", err)
	}
	if f.Type != "tag" {
		return frag{}, "", stErr(path+".type", "expected a tag format, got %q", f.Type)
	}
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(raw, &keys)
	for k := range keys {
		if k != "type" && !slices.Contains(stFields["tag"], k) {
			return frag{}, "", stErr(path+"."+k, "unknown field for a tag format (it takes begin, content, end)")
		}
	}
	if f.Begin == nil || f.End == nil || len(f.Content) == 0 {
		return frag{}, "", stErr(path, "a tag needs begin, content and end")
	}
	var content struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(f.Content, &content)
	b := c.b
	var body frag
	if stop := strings.TrimSpace(*f.End); content.Type == "any_text" && stop != "" {
		var ck map[string]json.RawMessage
		_ = json.Unmarshal(f.Content, &ck)
		for k := range ck {
			if k != "type" {
				return frag{}, "", stErr(path+".content."+k, "unknown field for an any_text format")
			}
		}
		body = b.avoiding([]string{stop})
	} else {
		var err error
		if body, err = c.format(f.Content, path+".content", depth+1); err != nil {
			return frag{}, "", err
		}
	}
	return b.cat(b.lit(*f.Begin), body, b.lit(*f.End)), *f.Begin, nil
}
