package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/ktserve/kt/constraint"
)

// tool_choice "required" and {"type": "function", "function": {"name":
// ...}} force the answer to be tool calls, as SGLang does: constrained
// decoding to the calls in the format the tool-call parser reads, each
// call's arguments held to its tool's JSON Schema (function.parameters):
//
//   - qwen25 (and qwen): <tool_call>\n{"name": NAME, "arguments": ARGS}\n</tool_call>
//     (Qwen2.5 and Qwen3 templates);
//   - qwen3_coder: <tool_call>\n<function=NAME>\n<parameter=P>\nV\n</parameter>\n...
//     </function>\n</tool_call> (Qwen3-Coder and Qwen3.5 templates), string
//     parameters as raw text, the others as JSON;
//   - deepseekv3: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
//     ...<｜tool▁calls▁end｜> (DeepSeek-V3, R1), calls separated by a newline;
//   - deepseekv31: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//     (DeepSeek-V3.1);
//   - kimi_k2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS
//     <|tool_call_end|>...<|tool_calls_section_end|> (Kimi-K2), IDX any number;
//   - no parser: a JSON array [{"name": NAME, "parameters": ARGS}, ...], as
//     SGLang's fallback, parsed into tool_calls here.
//
// One or more calls, separated by a newline in the Qwen forms; one only
// with parallel_tool_calls false. A named choice renders only that tool in the
// prompt, as SGLang does.

// toolChoice is a request's tool_choice.
type toolChoice struct {
	mode string // "auto", "none", "required" or "function"
	name string // the function of mode "function"
}

// forces reports whether the answer must be tool calls.
func (c toolChoice) forces() bool { return c.mode == "required" || c.mode == "function" }

// parseToolChoice reads tool_choice (absent: auto).
func parseToolChoice(raw json.RawMessage) (toolChoice, error) {
	if len(raw) == 0 || isNull(raw) {
		return toolChoice{mode: "auto"}, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return toolChoice{mode: s}, nil
		}
		return toolChoice{}, badRequest("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got %q", s)
	}
	var named struct {
		Type     string `json:"type"`
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Function == nil || named.Function.Name == "" {
		return toolChoice{}, badRequest("tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	return toolChoice{mode: "function", name: named.Function.Name}, nil
}

// parseTools checks the request's tools and tool_choice and returns the
// tools offered to the model (none with tool_choice "none", the named one
// for a named choice) with their raw JSON.
func parseTools(req *chatRequest) ([]toolDef, []json.RawMessage, toolChoice, error) {
	choice, err := parseToolChoice(req.ToolChoice)
	if err != nil {
		return nil, nil, choice, err
	}
	if choice.mode == "none" {
		return nil, nil, choice, nil
	}
	var tools []toolDef
	var raws []json.RawMessage
	for i, raw := range req.Tools {
		var t toolDef
		if err := json.Unmarshal(raw, &t); err != nil || t.Type != "function" || t.Function.Name == "" {
			return nil, nil, choice, badRequest(fmt.Sprintf("tools[%d]", i), "tools[%d]: expected {\"type\": \"function\", \"function\": {\"name\": ...}}", i)
		}
		if p := t.Function.Parameters; len(p) > 0 && !isNull(p) {
			if _, err := parseObject(p); err != nil {
				return nil, nil, choice, badRequest(fmt.Sprintf("tools[%d].function.parameters", i), "tools[%d].function.parameters must be a JSON Schema object", i)
			}
		}
		if choice.mode == "function" && t.Function.Name != choice.name {
			continue
		}
		tools = append(tools, t)
		raws = append(raws, raw)
	}
	switch {
	case choice.mode == "required" && len(req.Tools) == 0:
		return nil, nil, choice, badRequest("tool_choice", "Tools cannot be empty if tool choice is set to required.")
	case choice.mode == "function" && len(req.Tools) == 0:
		return nil, nil, choice, badRequest("tool_choice", "Tools cannot be empty if tool choice is set to a specific tool.")
	case choice.mode == "function" && len(tools) == 0:
		return nil, nil, choice, badRequest("tool_choice.function.name", "Tool '%s' not found in tools list.", choice.name)
	}
	return tools, raws, choice, nil
}

// toolForm is how forced tool calls are written.
type toolForm int

const (
	formJSONTag     toolForm = iota // <tool_call>{json}</tool_call>
	formXML                         // <tool_call><function=...>
	formArray                       // [{"name", "parameters"}]
	formDeepSeekV3                  // deepseekv3's section
	formDeepSeekV31                 // deepseekv31's section
	formKimiK2                      // kimi_k2's section
)

// planToolChoice constrains a chat plan whose tool_choice forces tool
// calls. The output constraint takes the place of response_format, regex
// and ebnf, which may not be set with it.
func (s *Server) planToolChoice(plan *chatPlan, in *chatInput, parallel bool) error {
	if !in.choice.forces() {
		return nil
	}
	if plan.grammar != nil || plan.jsonMode {
		return badRequest("tool_choice", "tool_choice %q forces tool calls and cannot be combined with response_format, regex or ebnf", in.choice.mode)
	}
	form := formArray
	switch s.opt.ToolCallParser {
	case "qwen25", "qwen":
		form = formJSONTag
	case "qwen3_coder":
		form = formXML
	case "deepseekv3":
		form = formDeepSeekV3
	case "deepseekv31":
		form = formDeepSeekV31
	case "kimi_k2":
		form = formKimiK2
	}
	tag, err := toolCallFormat(in.tools, form, parallel)
	if err != nil {
		return err
	}
	g, err := s.grammar("tools\x00"+string(tag), "tool_choice", func() (*constraint.DFA, error) {
		return constraint.CompileStructuralTag(tag)
	})
	if err != nil {
		return err
	}
	plan.grammar = g
	plan.tools = in.tools
	plan.toolArray = form == formArray
	return nil
}

// marshalPlain is JSON without HTML escaping (names and tags as written).
func marshalPlain(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(b.Bytes(), "\n")
}

// toolParams is a tool's parameters schema ({"type": "object"} when it has
// none).
func toolParams(t toolDef) json.RawMessage {
	if p := t.Function.Parameters; len(p) > 0 && !isNull(p) {
		return p
	}
	return json.RawMessage(`{"type":"object","properties":{}}`)
}

// toolCallFormat builds the structural tag (format form) of the forced
// calls.
func toolCallFormat(tools []toolDef, form toolForm, parallel bool) ([]byte, error) {
	type obj = map[string]any
	if form == formArray {
		schema, err := toolArraySchema(tools, parallel)
		if err != nil {
			return nil, err
		}
		return marshalPlain(obj{"type": "structural_tag", "format": obj{"type": "json_schema", "json_schema": schema}}), nil
	}
	var tags []any
	// The section formats: their calls between the section's markers.
	var sectionBegin, sectionEnd, separator string
	switch form {
	case formDeepSeekV3:
		sectionBegin, sectionEnd, separator = dsCallsBegin, dsCallsEnd, "\n"
	case formDeepSeekV31:
		sectionBegin, sectionEnd = dsCallsBegin, dsCallsEnd
	case formKimiK2:
		sectionBegin, sectionEnd = kimiSectionBegin, kimiSectionEnd
	}
	for i, t := range tools {
		name := string(marshalPlain(t.Function.Name))
		args := obj{"type": "json_schema", "json_schema": toolParams(t)}
		switch form {
		case formDeepSeekV3:
			tags = append(tags, obj{"type": "tag",
				"begin": dsCallBegin + "function" + dsSep + t.Function.Name + "\n```json\n", "content": args, "end": "\n```" + dsCallEnd})
		case formDeepSeekV31:
			tags = append(tags, obj{"type": "tag", "begin": dsCallBegin + t.Function.Name + dsSep, "content": args, "end": dsCallEnd})
		case formKimiK2:
			// The arguments on one line: kimi_k2 reads them only so.
			expr, err := constraint.SchemaRegex(toolParams(t), constraint.SchemaOptions{SingleLine: true})
			if err != nil {
				return nil, badRequest(fmt.Sprintf("tools[%d].function.parameters", i), "tools[%d].function.parameters: %v", i, err)
			}
			tags = append(tags, obj{"type": "tag", "begin": kimiCallBegin + "functions." + t.Function.Name + ":",
				"content": obj{"type": "sequence", "elements": []any{obj{"type": "regex", "pattern": "[0-9]+"},
					obj{"type": "const_string", "value": kimiArgBegin}, obj{"type": "regex", "pattern": expr}}},
				"end": kimiCallEnd})
		case formJSONTag:
			tags = append(tags, obj{"type": "tag",
				"begin":   "<tool_call>\n{\"name\": " + name + ", \"arguments\": ",
				"content": obj{"type": "json_schema", "json_schema": toolParams(t)},
				"end":     "}\n</tool_call>"})
		case formXML:
			content, err := xmlParams(t, i)
			if err != nil {
				return nil, err
			}
			tags = append(tags, obj{"type": "tag",
				"begin":   "<tool_call>\n<function=" + t.Function.Name + ">\n",
				"content": content,
				"end":     "</function>\n</tool_call>"})
		}
	}
	calls := obj{"type": "tags_with_separator", "separator": "\n", "tags": tags,
		"at_least_one": true, "stop_after_first": !parallel}
	if sectionBegin == "" {
		return marshalPlain(obj{"type": "structural_tag", "format": calls}), nil
	}
	// The section's end marker may be left out: the parser reads the calls
	// without it, and the sequence may end after the last call.
	calls["separator"] = separator
	end := obj{"type": "or", "elements": []any{obj{"type": "const_string", "value": sectionEnd}, obj{"type": "const_string", "value": ""}}}
	return marshalPlain(obj{"type": "structural_tag", "format": obj{"type": "sequence", "elements": []any{
		obj{"type": "const_string", "value": sectionBegin}, calls, end}}}), nil
}

// xmlParams is the content of a qwen3_coder call: each property of the
// parameters schema in its order, required ones always, the others
// optionally; string properties as raw text (an enum as its values),
// others as JSON under their schema. Parameters without properties take
// any text.
func xmlParams(t toolDef, i int) (any, error) {
	type obj = map[string]any
	var schema struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	_ = json.Unmarshal(toolParams(t), &schema)
	props, err := parseObject(schema.Properties)
	if err != nil || len(props) == 0 {
		return obj{"type": "any_text"}, nil
	}
	elems := []any{obj{"type": "const_string", "value": ""}}
	for _, p := range props {
		var ps struct {
			Type any   `json:"type"`
			Enum []any `json:"enum"`
		}
		if err := json.Unmarshal(p.val, &ps); err != nil {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.parameters.properties.%s", i, p.key), "expected a JSON Schema object")
		}
		var value any = obj{"type": "json_schema", "json_schema": p.val}
		if ps.Type == "string" {
			value = obj{"type": "any_text"}
			var strs []any
			for _, e := range ps.Enum {
				if s, ok := e.(string); ok {
					strs = append(strs, obj{"type": "const_string", "value": s})
				}
			}
			if len(strs) > 0 {
				value = obj{"type": "or", "elements": strs}
			}
		}
		tag := obj{"type": "tag", "begin": "<parameter=" + p.key + ">\n", "content": value, "end": "\n</parameter>\n"}
		if slices.Contains(schema.Required, p.key) {
			elems = append(elems, tag)
		} else {
			elems = append(elems, obj{"type": "or", "elements": []any{tag, obj{"type": "const_string", "value": ""}}})
		}
	}
	return obj{"type": "sequence", "elements": elems}, nil
}

// toolArraySchema is SGLang's schema of forced calls without a parser: an
// array of {"name", "parameters"} objects, the tools' $defs at the root.
func toolArraySchema(tools []toolDef, parallel bool) (map[string]any, error) {
	defs := map[string]json.RawMessage{}
	var items []any
	for i, t := range tools {
		params := toolParams(t)
		var p struct {
			Defs map[string]json.RawMessage `json:"$defs"`
		}
		_ = json.Unmarshal(params, &p)
		for k, v := range p.Defs {
			if old, ok := defs[k]; ok && !jsonEqual(old, v) {
				return nil, badRequest(fmt.Sprintf("tools[%d].function.parameters.$defs.%s", i, k), "Tool definition '%s' has multiple schemas, which is not supported.", k)
			}
			defs[k] = v
		}
		items = append(items, map[string]any{
			"type": "object",
			"properties": map[string]any{
				"name":       map[string]any{"type": "string", "enum": []string{t.Function.Name}},
				"parameters": params,
			},
			"required":             []string{"name", "parameters"},
			"additionalProperties": false,
		})
	}
	schema := map[string]any{"type": "array", "minItems": 1, "items": map[string]any{"anyOf": items}}
	if !parallel {
		schema["maxItems"] = 1
	}
	if len(defs) > 0 {
		schema["$defs"] = defs
	}
	return schema, nil
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && x.String() == y.String()
}

// feedArray is toolExtractor.feed for forced calls written as a JSON
// array: the output is held and, at the end, parsed into calls (or given
// back as content when it is not such an array, as when max_tokens cut it).
func (t *toolExtractor) feedArray(text string, final bool) string {
	t.callBuf.WriteString(text)
	if !final {
		return ""
	}
	raw := t.callBuf.String()
	t.callBuf.Reset()
	var calls []struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(raw), &calls); err != nil || len(calls) == 0 {
		return raw
	}
	for _, c := range calls {
		if c.Name == "" {
			return raw
		}
	}
	for _, c := range calls {
		var tc toolCall
		idx := len(t.calls)
		tc.Index = &idx
		tc.ID = fmt.Sprintf("call_%s_%d", t.prefix, t.nextID)
		t.nextID++
		tc.Type = "function"
		tc.Function.Name = c.Name
		tc.Function.Arguments = strings.TrimSpace(string(c.Parameters))
		t.calls = append(t.calls, tc)
	}
	return ""
}
