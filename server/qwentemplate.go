package server

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// QwenTemplate renders conversations as Qwen3's chat template does (ChatML
// with a tools block, <tool_call> JSON calls, <tool_response> results and
// the enable_thinking switch). It is the built-in fallback for ChatML
// models when no Jinja engine is linked in; the Jinja template from the
// model's tokenizer_config.json takes precedence when one is.
var QwenTemplate ChatTemplate = ChatTemplateFunc(renderQwen)

func str(v any) string {
	s, _ := v.(string)
	return s
}

func renderQwen(messages []map[string]any, tools []map[string]any, vars map[string]any) (string, error) {
	var b strings.Builder
	first := 0
	if len(tools) > 0 {
		b.WriteString("<|im_start|>system\n")
		if len(messages) > 0 && str(messages[0]["role"]) == "system" {
			b.WriteString(str(messages[0]["content"]) + "\n\n")
			first = 1
		}
		b.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
		for _, t := range tools {
			b.WriteString("\n" + pyJSON(t))
		}
		b.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")
	} else if len(messages) > 0 && str(messages[0]["role"]) == "system" {
		b.WriteString("<|im_start|>system\n" + str(messages[0]["content"]) + "<|im_end|>\n")
		first = 1
	}
	lastQuery := len(messages) - 1
	for i := len(messages) - 1; i >= 0; i-- {
		c := str(messages[i]["content"])
		if str(messages[i]["role"]) == "user" && !(strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")) {
			lastQuery = i
			break
		}
	}
	for i := first; i < len(messages); i++ {
		m := messages[i]
		role, content := str(m["role"]), str(m["content"])
		switch role {
		case "user", "system":
			b.WriteString("<|im_start|>" + role + "\n" + content + "<|im_end|>\n")
		case "assistant":
			reasoning := ""
			if rc, ok := m["reasoning_content"].(string); ok {
				reasoning = rc
			} else if k := strings.LastIndex(content, "</think>"); k >= 0 {
				reasoning = content[:k]
				if j := strings.LastIndex(reasoning, "<think>"); j >= 0 {
					reasoning = reasoning[j+len("<think>"):]
				}
				reasoning = strings.TrimLeft(strings.TrimRight(reasoning, "\n"), "\n")
				content = strings.TrimLeft(content[k+len("</think>"):], "\n")
			}
			if i > lastQuery && (i == len(messages)-1 || reasoning != "") {
				b.WriteString("<|im_start|>assistant\n<think>\n" + strings.Trim(reasoning, "\n") + "\n</think>\n\n" + strings.TrimLeft(content, "\n"))
			} else {
				b.WriteString("<|im_start|>assistant\n" + content)
			}
			calls, _ := m["tool_calls"].([]any)
			for j, c := range calls {
				cm, _ := c.(map[string]any)
				if fn, ok := cm["function"].(map[string]any); ok {
					cm = fn
				}
				if j > 0 || content != "" {
					b.WriteString("\n")
				}
				args := cm["arguments"]
				as, isStr := args.(string)
				if !isStr {
					as = pyJSON(args)
				}
				b.WriteString("<tool_call>\n{\"name\": \"" + str(cm["name"]) + "\", \"arguments\": " + as + "}\n</tool_call>")
			}
			b.WriteString("<|im_end|>\n")
		case "tool":
			if i == 0 || str(messages[i-1]["role"]) != "tool" {
				b.WriteString("<|im_start|>user")
			}
			b.WriteString("\n<tool_response>\n" + content + "\n</tool_response>")
			if i == len(messages)-1 || str(messages[i+1]["role"]) != "tool" {
				b.WriteString("<|im_end|>\n")
			}
		default:
			return "", fmt.Errorf("message %d: unknown role %q", i, role)
		}
	}
	if gp, _ := vars["add_generation_prompt"].(bool); gp {
		b.WriteString("<|im_start|>assistant\n")
		if et, ok := vars["enable_thinking"].(bool); ok && !et {
			b.WriteString("<think>\n\n</think>\n\n")
		}
	}
	return b.String(), nil
}

// pyJSON writes v as Python's json.dumps does by default (", " and ": "
// separators, non-ASCII kept as is); object keys are sorted.
func pyJSON(v any) string {
	var b strings.Builder
	writePyJSON(&b, v)
	return b.String()
}

func writePyJSON(b *strings.Builder, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writePyJSON(b, k)
			b.WriteString(": ")
			writePyJSON(b, x[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writePyJSON(b, e)
		}
		b.WriteByte(']')
	default:
		var buf strings.Builder
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if enc.Encode(x) != nil {
			b.WriteString("null")
			return
		}
		b.WriteString(strings.TrimSuffix(buf.String(), "\n"))
	}
}
