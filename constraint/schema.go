package constraint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// SchemaOptions tune CompileSchema.
type SchemaOptions struct {
	// Strict applies OpenAI's strict-mode rules: the root is an object and
	// every object lists all its properties in required and sets
	// additionalProperties to false.
	Strict bool
	// SingleLine keeps the JSON text on one line: the whitespace between
	// tokens is spaces and tabs (strings never hold a raw newline), for
	// formats read line by line (Kimi-K2's tool-call arguments).
	SingleLine bool
}

// Regex pieces of JSON.
const (
	// ws is the whitespace allowed between tokens: any run of JSON
	// whitespace, as xgrammar's default (any_whitespace) in SGLang.
	ws = `[ \n\t]*`
	// wsLine is ws without newlines (SchemaOptions.SingleLine).
	wsLine     = `[ \t]*`
	strChar    = `(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u` + hex4 + `)`
	hex4       = `[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]`
	jsonString = `"` + strChar + `*"`
	jsonInt    = `-?(?:0|[1-9][0-9]*)`
	// jsonNumber bounds the exponent to two digits, so that every number
	// fits a float64 (1e999 is valid JSON that most parsers reject).
	jsonNumber = jsonInt + `(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,2})?`
	// anyDepth is how deeply a value of unconstrained type may nest.
	anyDepth = 2
	// maxRegexLen bounds the regex a schema expands to.
	maxRegexLen = 1 << 18
	// maxStringLen bounds minLength and maxLength (each character is a
	// dozen DFA states).
	maxStringLen = 512
	// maxSchemaDepth bounds schema nesting.
	maxSchemaDepth = 64
)

var formats = map[string]string{
	// date: real calendar days, 29 February in leap years only.
	"date": `(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)`,
	"time": `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])`,
	"uuid": `[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`,
	"ipv4": `(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`,
	// uri: http(s) URLs with a host name, optional port, path and query.
	"uri": `https?://[a-zA-Z0-9](?:[a-zA-Z0-9.-]{0,62}[a-zA-Z0-9])?(?::[0-9]{1,5})?(?:/[a-zA-Z0-9._~%!$&'()*+,;=:@/-]*)?(?:\?[a-zA-Z0-9._~%!$&'()*+,;=:@/?-]*)?`,
	// email: a dot-atom local part of at most 64 bytes and a host name of
	// 2 to 4 labels (RFC 5321 limits; no quoted local parts, no IP hosts).
	"email": `[a-zA-Z0-9_%+-]{1,32}(?:\.[a-zA-Z0-9_%+-]{1,31})?@(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?\.){1,3}[a-zA-Z]{2,24}`,
}

// annotations are keywords that do not constrain a value.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true,
	"$schema": true, "$id": true, "$comment": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "$defs": true, "definitions": true,
	// OpenAPI's discriminator names the property oneOf branches differ in;
	// the branches themselves carry the constraint.
	"discriminator": true, "contentEncoding": true, "contentMediaType": true,
}

// supported are the constraining keywords the compiler understands.
var supported = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "prefixItems": true, "minItems": true, "maxItems": true, "enum": true, "const": true,
	"anyOf": true, "oneOf": true, "allOf": true, "$ref": true,
	"minLength": true, "maxLength": true, "pattern": true, "format": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
}

// SchemaError is a schema the compiler refuses: the JSON pointer of the
// subschema, and the keyword when one is to blame.
type SchemaError struct {
	Path    string // JSON pointer, "#" for the root
	Keyword string
	Msg     string
}

func (e *SchemaError) Error() string {
	if e.Keyword != "" {
		return fmt.Sprintf("json_schema %s: keyword %q: %s", e.Path, e.Keyword, e.Msg)
	}
	return fmt.Sprintf("json_schema %s: %s", e.Path, e.Msg)
}

// CompileSchema compiles a JSON Schema to a DFA over the bytes of the JSON
// texts it accepts (see SchemaRegex for the subset).
func CompileSchema(schema []byte, opt SchemaOptions) (*DFA, error) {
	expr, err := SchemaRegex(schema, opt)
	if err != nil {
		return nil, err
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		if se := (*syntax.Error)(nil); errors.As(err, &se) && (se.Code == syntax.ErrInvalidRepeatSize || se.Code == syntax.ErrLarge) {
			return nil, fmt.Errorf("json_schema: the repetition bounds (maxLength, maxItems) nest too deeply: %w", ErrTooLarge)
		}
		return nil, fmt.Errorf("json_schema: %w", err)
	}
	d, err := compileTree(re)
	if err != nil {
		return nil, fmt.Errorf("json_schema: %w", err)
	}
	return d, nil
}

// SchemaRegex translates a JSON Schema to a regex over JSON texts: the
// value itself, with no whitespace before or after it (the end-of-sequence
// token comes right after the value).
// Supported: type (one or a list), properties (in schema order) with
// required and additionalProperties false, items, minItems, maxItems,
// enum, const, anyOf, oneOf (as anyOf), allOf of one schema, $ref to
// #/$defs or #/definitions (not recursive), string minLength, maxLength,
// pattern (a full match of the string's content) and formats date, time,
// date-time, uuid, ipv4, email and uri (http/https), and integer bounds
// (minimum/maximum, exclusive too) on integers and numbers. A missing
// additionalProperties means false (xgrammar's strict default). Anything
// else is a *SchemaError naming the keyword.
func SchemaRegex(schema []byte, opt SchemaOptions) (string, error) {
	var root any
	if err := json.Unmarshal(schema, &root); err != nil {
		return "", &SchemaError{Path: "#", Msg: "not valid JSON: " + err.Error()}
	}
	c := &schemaCompiler{root: schema, strict: opt.Strict, ws: ws}
	if opt.SingleLine {
		c.ws = wsLine
	}
	if opt.Strict {
		if m, ok := root.(map[string]any); !ok || m["type"] != "object" {
			return "", &SchemaError{Path: "#", Keyword: "type", Msg: `strict mode needs the root schema to be of type "object"`}
		}
	}
	body, err := c.value(schema, "#", 0)
	if err != nil {
		return "", err
	}
	return body, nil
}

type schemaCompiler struct {
	root   []byte
	strict bool
	ws     string   // whitespace between tokens (ws or wsLine)
	refs   []string // $refs being expanded (recursion check)
	size   int
}

func (c *schemaCompiler) errf(path, kw, format string, a ...any) error {
	return &SchemaError{Path: path, Keyword: kw, Msg: fmt.Sprintf(format, a...)}
}

// object decodes a schema object keeping the order of "properties".
func decodeObject(raw []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// orderedKeys returns the keys of a JSON object in document order.
func orderedKeys(raw []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not an object")
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, t.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

func (c *schemaCompiler) value(raw []byte, path string, depth int) (string, error) {
	if depth > maxSchemaDepth {
		return "", c.errf(path, "", "schema nests deeper than %d", maxSchemaDepth)
	}
	raw = bytes.TrimSpace(raw)
	switch string(raw) {
	case "true", "{}":
		return anyValue(anyDepth, c.ws), nil
	case "false":
		return "", c.errf(path, "", "schema false matches nothing")
	}
	m, err := decodeObject(raw)
	if err != nil {
		return "", c.errf(path, "", "a schema must be an object or a boolean")
	}
	out, err := c.object(m, raw, path, depth)
	if err != nil {
		return "", err
	}
	c.size += len(out)
	if c.size > maxRegexLen || len(out) > maxRegexLen {
		return "", fmt.Errorf("json_schema %s: the schema expands past %d bytes of grammar: %w", path, maxRegexLen, ErrTooLarge)
	}
	return out, nil
}

// only refuses keywords of m other than annotations and allowed.
func (c *schemaCompiler) only(m map[string]json.RawMessage, path, with string, allowed ...string) error {
	for _, k := range sortedKeys(m) {
		if !annotations[k] && !slices.Contains(allowed, k) {
			return c.errf(path, k, "is not supported beside %q", with)
		}
	}
	return nil
}

func sortedKeys(m map[string]json.RawMessage) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (c *schemaCompiler) object(m map[string]json.RawMessage, raw []byte, path string, depth int) (string, error) {
	for _, k := range sortedKeys(m) {
		if !annotations[k] && !supported[k] {
			return "", c.errf(path, k, "is not supported")
		}
	}
	if ref, ok := m["$ref"]; ok {
		if err := c.only(m, path, "$ref", "$ref"); err != nil {
			return "", err
		}
		return c.ref(ref, path, depth)
	}
	if v, ok := m["allOf"]; ok {
		if err := c.only(m, path, "allOf", "allOf"); err != nil {
			return "", err
		}
		var subs []json.RawMessage
		if json.Unmarshal(v, &subs) != nil || len(subs) != 1 {
			return "", c.errf(path, "allOf", "only an allOf of exactly one schema is supported")
		}
		return c.value(subs[0], path+"/allOf/0", depth+1)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		v, ok := m[kw]
		if !ok {
			continue
		}
		if err := c.only(m, path, kw, kw); err != nil {
			return "", err
		}
		var subs []json.RawMessage
		if json.Unmarshal(v, &subs) != nil || len(subs) == 0 {
			return "", c.errf(path, kw, "must be a non-empty array of schemas")
		}
		alts := make([]string, len(subs))
		for i, s := range subs {
			r, err := c.value(s, fmt.Sprintf("%s/%s/%d", path, kw, i), depth+1)
			if err != nil {
				return "", err
			}
			alts[i] = r
		}
		return "(?:" + strings.Join(alts, "|") + ")", nil
	}
	types, err := c.types(m, path)
	if err != nil {
		return "", err
	}
	if v, ok := m["const"]; ok {
		return c.literals([]json.RawMessage{v}, types, path, "const")
	}
	if v, ok := m["enum"]; ok {
		var vals []json.RawMessage
		if json.Unmarshal(v, &vals) != nil || len(vals) == 0 {
			return "", c.errf(path, "enum", "must be a non-empty array")
		}
		return c.literals(vals, types, path, "enum")
	}
	if types == nil {
		return anyValue(anyDepth, c.ws), nil
	}
	alts := make([]string, 0, len(types))
	for _, t := range types {
		var r string
		var err error
		switch t {
		case "string":
			r, err = c.str(m, path)
		case "integer":
			r, err = c.integer(m, path)
		case "number":
			r, err = c.number(m, path)
		case "boolean":
			r = "(?:true|false)"
		case "null":
			r = "null"
		case "object":
			r, err = c.obj(m, raw, path, depth)
		case "array":
			r, err = c.array(m, path, depth)
		}
		if err != nil {
			return "", err
		}
		alts = append(alts, r)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return "(?:" + strings.Join(alts, "|") + ")", nil
}

// types returns the schema's types: the type keyword, or the one its
// keywords imply, or nil for any value.
func (c *schemaCompiler) types(m map[string]json.RawMessage, path string) ([]string, error) {
	valid := []string{"string", "integer", "number", "boolean", "null", "object", "array"}
	if v, ok := m["type"]; ok {
		var one string
		var list []string
		if json.Unmarshal(v, &one) == nil {
			list = []string{one}
		} else if json.Unmarshal(v, &list) != nil || len(list) == 0 {
			return nil, c.errf(path, "type", "must be a type name or a non-empty array of them")
		}
		for _, t := range list {
			if !slices.Contains(valid, t) {
				return nil, c.errf(path, "type", "unknown type %q", t)
			}
		}
		return list, nil
	}
	has := func(ks ...string) bool {
		for _, k := range ks {
			if _, ok := m[k]; ok {
				return true
			}
		}
		return false
	}
	switch {
	case has("const", "enum"):
		return nil, nil
	case has("properties", "required", "additionalProperties"):
		return []string{"object"}, nil
	case has("items", "minItems", "maxItems"):
		return []string{"array"}, nil
	case has("minLength", "maxLength", "pattern", "format"):
		return []string{"string"}, nil
	case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
		return []string{"number"}, nil
	}
	return nil, nil
}

// literals matches exactly the given JSON values (compact form), keeping
// those of the allowed types.
func (c *schemaCompiler) literals(vals []json.RawMessage, types []string, path, kw string) (string, error) {
	var alts []string
	for _, v := range vals {
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return "", c.errf(path, kw, "bad value: %v", err)
		}
		if types != nil && !slices.ContainsFunc(types, func(t string) bool { return jsonIsType(buf.Bytes(), t) }) {
			continue
		}
		alts = append(alts, regexp.QuoteMeta(buf.String()))
	}
	if len(alts) == 0 {
		return "", c.errf(path, kw, "no value is of the schema's type")
	}
	return "(?:" + strings.Join(alts, "|") + ")", nil
}

func jsonIsType(v []byte, t string) bool {
	var x any
	if json.Unmarshal(v, &x) != nil {
		return false
	}
	switch x := x.(type) {
	case string:
		return t == "string"
	case float64:
		return t == "number" || t == "integer" && x == math.Trunc(x)
	case bool:
		return t == "boolean"
	case nil:
		return t == "null"
	case map[string]any:
		return t == "object"
	case []any:
		return t == "array"
	}
	return false
}

func (c *schemaCompiler) ref(raw json.RawMessage, path string, depth int) (string, error) {
	var ref string
	if json.Unmarshal(raw, &ref) != nil {
		return "", c.errf(path, "$ref", "must be a string")
	}
	if slices.Contains(c.refs, ref) {
		return "", c.errf(path, "$ref", "recursive reference %q is not supported", ref)
	}
	if ref != "#" && !strings.HasPrefix(ref, "#/") {
		return "", c.errf(path, "$ref", "only local references (#/...) are supported, got %q", ref)
	}
	target := json.RawMessage(c.root)
	if ref != "#" {
		for _, tok := range strings.Split(ref[2:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			var m map[string]json.RawMessage
			if json.Unmarshal(target, &m) != nil {
				return "", c.errf(path, "$ref", "reference %q does not resolve", ref)
			}
			next, ok := m[tok]
			if !ok {
				return "", c.errf(path, "$ref", "reference %q does not resolve", ref)
			}
			target = next
		}
	}
	c.refs = append(c.refs, ref)
	defer func() { c.refs = c.refs[:len(c.refs)-1] }()
	return c.value(target, ref, depth+1)
}

// intKeyword reads keyword k of the schema at path, a non-negative integer
// when present (has).
func (c *schemaCompiler) intKeyword(m map[string]json.RawMessage, path, k string) (n int, has bool, err error) {
	v, ok := m[k]
	if !ok {
		return 0, false, nil
	}
	var f float64
	switch {
	case json.Unmarshal(v, &f) != nil || f < 0 || f != math.Trunc(f):
		return 0, true, c.errf(path, k, "must be a non-negative integer, got %s", v)
	case f > 1<<20:
		return 0, true, c.errf(path, k, "%s is larger than the %d supported", v, 1<<20)
	}
	return int(f), true, nil
}

func (c *schemaCompiler) str(m map[string]json.RawMessage, path string) (string, error) {
	minL, hasMin, err := c.intKeyword(m, path, "minLength")
	if err != nil {
		return "", err
	}
	maxL, hasMax, err := c.intKeyword(m, path, "maxLength")
	if err != nil {
		return "", err
	}
	_, hasPat := m["pattern"]
	_, hasFmt := m["format"]
	if hasPat && hasFmt {
		return "", c.errf(path, "pattern", "pattern together with format is not supported")
	}
	if (hasPat || hasFmt) && (hasMin || hasMax) {
		kw := "minLength"
		if !hasMin {
			kw = "maxLength"
		}
		return "", c.errf(path, kw, "is not supported together with pattern or format")
	}
	if hasFmt {
		var f string
		_ = json.Unmarshal(m["format"], &f)
		if f == "date-time" {
			return `"` + formats["date"] + `T` + formats["time"] + `"`, nil
		}
		r, ok := formats[f]
		if !ok {
			return "", c.errf(path, "format", "format %q is not supported (supported: date, time, date-time, uuid, ipv4, email, uri)", f)
		}
		return `"` + r + `"`, nil
	}
	if hasPat {
		var p string
		if json.Unmarshal(m["pattern"], &p) != nil {
			return "", c.errf(path, "pattern", "must be a string")
		}
		r, err := stringPattern(p)
		if err != nil {
			return "", c.errf(path, "pattern", "%v", err)
		}
		return `"` + r + `"`, nil
	}
	if !hasMin && !hasMax {
		return jsonString, nil
	}
	if hasMax && maxL < minL {
		return "", c.errf(path, "maxLength", "maxLength %d is below minLength %d", maxL, minL)
	}
	if minL > maxStringLen || maxL > maxStringLen {
		return "", c.errf(path, "maxLength", "string lengths over %d are not supported", maxStringLen)
	}
	if !hasMax {
		return fmt.Sprintf(`"%s{%d,}"`, strChar, minL), nil
	}
	return fmt.Sprintf(`"%s{%d,%d}"`, strChar, minL, maxL), nil
}

// stringPattern rewrites a pattern to match the raw bytes of a JSON
// string's content: characters JSON must escape are left out of classes,
// and literal ones are refused.
func stringPattern(p string) (string, error) {
	re, err := syntax.Parse(p, syntax.Perl)
	if err != nil {
		return "", err
	}
	re, err = stripAnchors(re)
	if err != nil {
		return "", err
	}
	// Characters a JSON string may hold unescaped.
	plain := []rune{0x20, '"' - 1, '"' + 1, '\\' - 1, '\\' + 1, unicode.MaxRune}
	var bad error
	var walk func(r *syntax.Regexp)
	walk = func(r *syntax.Regexp) {
		switch r.Op {
		case syntax.OpLiteral:
			for _, ch := range r.Rune {
				if ch < 0x20 || ch == '"' || ch == '\\' {
					bad = fmt.Errorf("pattern matches %q, which a JSON string must escape", ch)
				}
			}
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			r.Op, r.Rune = syntax.OpCharClass, slices.Clone(plain)
		case syntax.OpCharClass:
			r.Rune = intersectRanges(r.Rune, plain)
			if len(r.Rune) == 0 {
				r.Op = syntax.OpNoMatch
			}
		}
		for _, s := range r.Sub {
			walk(s)
		}
	}
	walk(re)
	if bad != nil {
		return "", bad
	}
	return "(?:" + re.String() + ")", nil
}

// intersectRanges intersects two sorted lists of inclusive rune ranges.
func intersectRanges(a, b []rune) []rune {
	var out []rune
	for i := 0; i+1 < len(a); i += 2 {
		for j := 0; j+1 < len(b); j += 2 {
			lo, hi := max(a[i], b[j]), min(a[i+1], b[j+1])
			if lo <= hi {
				out = append(out, lo, hi)
			}
		}
	}
	return out
}

// number handles type number; bounds must be integers (then the number
// is written without an exponent, and the range is exact).
func (c *schemaCompiler) number(m map[string]json.RawMessage, path string) (string, error) {
	var b numBounds
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		var f float64
		if json.Unmarshal(v, &f) != nil || f != math.Trunc(f) || math.Abs(f) > 1e15 {
			return "", c.errf(path, k, "bounds on numbers must be integers within ±1e15 (fractional bounds are not supported)")
		}
		n := int64(f)
		switch k {
		case "minimum", "exclusiveMinimum":
			excl := k == "exclusiveMinimum"
			if !b.hasLo || n > b.lo || n == b.lo && excl {
				b.hasLo, b.lo, b.loExcl = true, n, excl
			}
		default:
			excl := k == "exclusiveMaximum"
			if !b.hasHi || n < b.hi || n == b.hi && excl {
				b.hasHi, b.hi, b.hiExcl = true, n, excl
			}
		}
	}
	if !b.hasLo && !b.hasHi {
		return jsonNumber, nil
	}
	r := b.regex()
	if r == "" {
		return "", c.errf(path, "minimum", "no number lies within the bounds")
	}
	return r, nil
}

// numBounds are integer bounds on a number.
type numBounds struct {
	hasLo, hasHi   bool
	lo, hi         int64
	loExcl, hiExcl bool
}

// Fraction patterns of bounded numbers.
const (
	anyFrac     = `(?:\.[0-9]+)?`
	zeroFrac    = `(?:\.0+)?`
	nonzeroFrac = `\.[0-9]*[1-9][0-9]*`
)

// regex matches the JSON numbers (no exponent) within b, or "" if none.
func (b numBounds) regex() string {
	var alts []string
	// x <= 0 side, as magnitudes: -x in [max(-hi, 0), -lo].
	if !b.hasLo || b.lo < 0 {
		mlo, mloExcl := int64(0), true // strictly negative
		if b.hasHi && b.hi < 0 {
			mlo, mloExcl = -b.hi, b.hiExcl
		}
		for _, r := range magnitudes(mlo, mloExcl, b.hasLo, -b.lo, b.loExcl) {
			alts = append(alts, "-"+r)
		}
	}
	// x >= 0 side.
	if !b.hasHi || b.hi > 0 || b.hi == 0 && !b.hiExcl {
		plo, ploExcl := int64(0), false
		if b.hasLo && b.lo >= 0 {
			plo, ploExcl = b.lo, b.loExcl
		}
		alts = append(alts, magnitudes(plo, ploExcl, b.hasHi, b.hi, b.hiExcl)...)
	}
	if len(alts) == 0 {
		return ""
	}
	return "(?:" + strings.Join(alts, "|") + ")"
}

// magnitudes returns regexes for the non-negative decimals m (integer part
// and optional fraction) with lo <(=) m <(=) hi, lo >= 0.
func magnitudes(lo int64, loExcl, hasHi bool, hi int64, hiExcl bool) []string {
	var out []string
	a := lo
	if loExcl {
		a = lo + 1
	}
	top := int64(math.MaxInt64)
	if hasHi {
		top = hi - 1
	}
	if a <= top {
		for _, r := range uintRange(uint64(a), uint64(top)) {
			out = append(out, "(?:"+r+")"+anyFrac)
		}
	}
	if loExcl && (!hasHi || lo < hi) {
		out = append(out, strconv.FormatInt(lo, 10)+nonzeroFrac)
	}
	if hasHi && !hiExcl && hi >= 0 && (hi > lo || hi == lo && !loExcl) {
		out = append(out, strconv.FormatInt(hi, 10)+zeroFrac)
	}
	return out
}

func (c *schemaCompiler) integer(m map[string]json.RawMessage, path string) (string, error) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	bounded := false
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		var f float64
		if json.Unmarshal(v, &f) != nil || math.Abs(f) > 1e15 {
			return "", c.errf(path, k, "must be a number within ±1e15")
		}
		bounded = true
		switch k {
		case "minimum":
			lo = max(lo, int64(math.Ceil(f)))
		case "exclusiveMinimum":
			lo = max(lo, int64(math.Floor(f))+1)
		case "maximum":
			hi = min(hi, int64(math.Floor(f)))
		case "exclusiveMaximum":
			hi = min(hi, int64(math.Ceil(f))-1)
		}
	}
	if !bounded {
		return jsonInt, nil
	}
	if lo > hi {
		return "", c.errf(path, "minimum", "no integer lies in [%d, %d]", lo, hi)
	}
	return intRange(lo, hi), nil
}

func (c *schemaCompiler) array(m map[string]json.RawMessage, path string, depth int) (string, error) {
	if _, ok := m["prefixItems"]; ok {
		return c.tuple(m, path, depth)
	}
	item := anyValue(anyDepth, c.ws)
	if v, ok := m["items"]; ok {
		if string(bytes.TrimSpace(v)) == "false" {
			return `\[` + c.ws + `\]`, nil
		}
		var err error
		if item, err = c.value(v, path+"/items", depth+1); err != nil {
			return "", err
		}
	}
	minI, _, err := c.intKeyword(m, path, "minItems")
	if err != nil {
		return "", err
	}
	maxI, hasMax, err := c.intKeyword(m, path, "maxItems")
	if err != nil {
		return "", err
	}
	if hasMax && maxI < minI {
		return "", c.errf(path, "maxItems", "maxItems %d is below minItems %d", maxI, minI)
	}
	for _, b := range []struct {
		k string
		n int
	}{{"minItems", minI}, {"maxItems", maxI}} {
		if b.n > 100 {
			return "", c.errf(path, b.k, "%s %d: item counts over 100 are not supported", b.k, b.n)
		}
	}
	sep := c.ws + "," + c.ws
	var body string
	switch {
	case hasMax && maxI == 0:
		body = ""
	case minI == 0:
		rest := "*"
		if hasMax {
			rest = fmt.Sprintf("{0,%d}", maxI-1)
		}
		body = "(?:" + item + "(?:" + sep + item + ")" + rest + ")?"
	default:
		rest := fmt.Sprintf("{%d,}", minI-1)
		if hasMax {
			rest = fmt.Sprintf("{%d,%d}", minI-1, maxI-1)
		}
		body = item + "(?:" + sep + item + ")" + rest
	}
	return `\[` + c.ws + body + c.ws + `\]`, nil
}

// tuple handles prefixItems when the array has exactly as many items as
// prefixItems lists (pydantic's tuples): minItems and maxItems both equal
// to it, or items false and minItems equal to it.
func (c *schemaCompiler) tuple(m map[string]json.RawMessage, path string, depth int) (string, error) {
	var prefix []json.RawMessage
	if json.Unmarshal(m["prefixItems"], &prefix) != nil || len(prefix) == 0 {
		return "", c.errf(path, "prefixItems", "must be a non-empty array of schemas")
	}
	n := len(prefix)
	minI, _, err := c.intKeyword(m, path, "minItems")
	if err != nil {
		return "", err
	}
	maxI, hasMax, err := c.intKeyword(m, path, "maxItems")
	if err != nil {
		return "", err
	}
	noMore := string(bytes.TrimSpace(m["items"])) == "false"
	if minI != n || !(noMore || hasMax && maxI == n) {
		return "", c.errf(path, "prefixItems", "only fixed-length tuples are supported: minItems and maxItems (or items: false) equal to the %d prefixItems", n)
	}
	parts := make([]string, n)
	for i, p := range prefix {
		r, err := c.value(p, fmt.Sprintf("%s/prefixItems/%d", path, i), depth+1)
		if err != nil {
			return "", err
		}
		parts[i] = r
	}
	return `\[` + c.ws + strings.Join(parts, c.ws+","+c.ws) + c.ws + `\]`, nil
}

func (c *schemaCompiler) obj(m map[string]json.RawMessage, raw []byte, path string, depth int) (string, error) {
	if v, ok := m["additionalProperties"]; ok && string(bytes.TrimSpace(v)) != "false" {
		if _, has := m["properties"]; has || c.strict {
			return "", c.errf(path, "additionalProperties", "only additionalProperties: false is supported beside properties")
		}
		return c.mapObject(v, path, depth)
	} else if !ok && c.strict {
		return "", c.errf(path, "additionalProperties", "strict mode requires additionalProperties to be supplied and to be false")
	}
	var names []string
	var props map[string]json.RawMessage
	if v, ok := m["properties"]; ok {
		var err error
		if names, err = orderedKeys(v); err != nil {
			return "", c.errf(path, "properties", "must be an object")
		}
		props, _ = decodeObject(v)
	}
	var required []string
	if v, ok := m["required"]; ok && json.Unmarshal(v, &required) != nil {
		return "", c.errf(path, "required", "must be an array of strings")
	}
	isRequired := make(map[string]bool, len(required))
	for _, r := range required {
		isRequired[r] = true
	}
	hasName := make(map[string]bool, len(names))
	for _, n := range names {
		hasName[n] = true
	}
	for _, r := range required {
		if !hasName[r] {
			return "", c.errf(path, "required", "required property %q is not in properties", r)
		}
	}
	if c.strict {
		for _, n := range names {
			if !isRequired[n] {
				return "", c.errf(path, "required", "strict mode requires every property in required; missing %q", n)
			}
		}
	}
	kv := make([]string, len(names))
	for i, n := range names {
		key := jsonQuote(n)
		val, err := c.value(props[n], path+"/properties/"+n, depth+1)
		if err != nil {
			return "", err
		}
		kv[i] = regexp.QuoteMeta(key) + c.ws + ":" + c.ws + val
	}
	sep := c.ws + "," + c.ws
	// piece(j): property j after a comma, optional unless required.
	piece := func(j int) string {
		if isRequired[names[j]] {
			return sep + kv[j]
		}
		return "(?:" + sep + kv[j] + ")?"
	}
	pieceLen := func(j int) int {
		if isRequired[names[j]] {
			return len(sep) + len(kv[j])
		}
		return len("(?:)?") + len(sep) + len(kv[j])
	}
	// The body has one alternative per possible first property (each
	// optional property before the first required one), and each repeats
	// the properties after it: the size grows with the square of the
	// number of leading optional properties. Sum it from the piece sizes
	// and refuse before building anything over the budget.
	nalts := len(names)
	for k, n := range names {
		if isRequired[n] {
			nalts = k + 1
			break
		}
	}
	tail := 0 // size of the pieces after k
	for j := nalts; j < len(names); j++ {
		tail += pieceLen(j)
	}
	total := 0
	for k := nalts - 1; k >= 0; k-- {
		total += len(kv[k]) + tail + 1
		if c.size+total > maxRegexLen {
			return "", fmt.Errorf("json_schema %s: the %d properties expand past %d bytes of grammar (each optional property before the first required one repeats those after it): %w", path, len(names), maxRegexLen, ErrTooLarge)
		}
		tail += pieceLen(k)
	}
	// rest(i): the properties from i on, each after a comma.
	rest := func(i int) string {
		var b strings.Builder
		for j := i; j < len(names); j++ {
			b.WriteString(piece(j))
		}
		return b.String()
	}
	// Alternatives by the first property present.
	alts := make([]string, 0, nalts)
	for k := range nalts {
		alts = append(alts, kv[k]+rest(k+1))
	}
	allOptional := nalts == 0 || !isRequired[names[nalts-1]]
	body := ""
	if len(alts) > 0 {
		body = "(?:" + strings.Join(alts, "|") + ")"
		if allOptional {
			body += "?"
		}
	}
	return `\{` + c.ws + body + c.ws + `\}`, nil
}

// mapObject is an object with no listed properties whose values all
// follow schema v (a map: pydantic's dict[str, T]); keys are any strings.
func (c *schemaCompiler) mapObject(v json.RawMessage, path string, depth int) (string, error) {
	val, err := c.value(v, path+"/additionalProperties", depth+1)
	if err != nil {
		return "", err
	}
	member := jsonString + c.ws + ":" + c.ws + val
	return `\{` + c.ws + "(?:" + member + "(?:" + c.ws + "," + c.ws + member + ")*)?" + c.ws + `\}`, nil
}

// jsonQuote is s as a JSON string, without encoding/json's HTML escaping
// (a model writes "a<b", not "a\u003cb").
func jsonQuote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// anyValue matches any JSON value nesting at most depth levels, with ws
// between tokens.
func anyValue(depth int, ws string) string {
	scalar := jsonString + "|" + jsonNumber + "|true|false|null"
	if depth == 0 {
		return "(?:" + scalar + ")"
	}
	v := anyValue(depth-1, ws)
	sep := ws + "," + ws
	member := jsonString + ws + ":" + ws + v
	obj := `\{` + ws + "(?:" + member + "(?:" + sep + member + ")*)?" + ws + `\}`
	arr := `\[` + ws + "(?:" + v + "(?:" + sep + v + ")*)?" + ws + `\]`
	return "(?:" + scalar + "|" + obj + "|" + arr + ")"
}

// intRange matches the decimal integers in [lo, hi] (JSON form: no
// leading zeros, "-" for negatives, no "-0").
func intRange(lo, hi int64) string {
	var alts []string
	if lo < 0 {
		nlo := uint64(1)
		if hi < 0 {
			nlo = uint64(-hi)
		}
		for _, r := range uintRange(nlo, uint64(-(lo+1))+1) {
			alts = append(alts, "-"+r)
		}
	}
	if hi >= 0 {
		alts = append(alts, uintRange(uint64(max(lo, 0)), uint64(hi))...)
	}
	return "(?:" + strings.Join(alts, "|") + ")"
}

// uintRange returns regexes that together match [lo, hi] exactly.
func uintRange(lo, hi uint64) []string {
	if lo > hi {
		return nil
	}
	var out []string
	// Split by number of digits.
	for lo <= hi {
		d := len(strconv.FormatUint(lo, 10))
		top := uint64(math.MaxUint64)
		if d < 20 {
			top = pow10(d) - 1
		}
		end := min(hi, top)
		out = append(out, sameLen(strconv.FormatUint(lo, 10), strconv.FormatUint(end, 10))...)
		if end == math.MaxUint64 || end == hi {
			break
		}
		lo = end + 1
	}
	return out
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// sameLen matches the numbers between a and b, both of the same length.
func sameLen(a, b string) []string {
	if a == b {
		return []string{a}
	}
	if len(a) == 1 {
		return []string{fmt.Sprintf("[%c-%c]", a[0], b[0])}
	}
	if a[0] == b[0] {
		var out []string
		for _, r := range sameLen(a[1:], b[1:]) {
			out = append(out, a[:1]+r)
		}
		return out
	}
	n := len(a) - 1
	var out []string
	lowAll := strings.Repeat("0", n)
	highAll := strings.Repeat("9", n)
	first, last := a[0], b[0]
	if a[1:] != lowAll {
		for _, r := range sameLen(a[1:], highAll) {
			out = append(out, a[:1]+r)
		}
		first++
	}
	tail := b[1:] != highAll
	if tail {
		last--
	}
	if first <= last {
		out = append(out, fmt.Sprintf("[%c-%c][0-9]{%d}", first, last, n))
	}
	if tail {
		for _, r := range sameLen(lowAll, b[1:]) {
			out = append(out, b[:1]+r)
		}
	}
	return out
}
