package fakemodel

import (
	"fmt"
	"strings"
)

// Special token ids of the byte-level Tokenizer: ids 0-255 are bytes.
const (
	EndOfText   int32 = 256 + iota // <|endoftext|>
	IMStart                        // <|im_start|>
	IMEnd                          // <|im_end|>
	Think                          // <think>
	EndThink                       // </think>
	ToolCall                       // <tool_call>
	EndToolCall                    // </tool_call>
)

var specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"}

// Tokenizer is a byte-level tokenizer: every byte is its own token, and
// the special strings above are single tokens. Ids past the specials (up to
// the runner's vocabulary) decode to nothing.
type Tokenizer struct{}

// Encode maps text to ids, matching special strings first.
func (Tokenizer) Encode(text string) []int32 {
	var out []int32
	for len(text) > 0 {
		matched := false
		if text[0] == '<' {
			for i, sp := range specials {
				if strings.HasPrefix(text, sp) {
					out = append(out, 256+int32(i))
					text = text[len(sp):]
					matched = true
					break
				}
			}
		}
		if !matched {
			out = append(out, int32(text[0]))
			text = text[1:]
		}
	}
	return out
}

// Decode maps ids back to text.
func (t Tokenizer) Decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		tb, _ := t.TokenBytes(id)
		b = append(b, tb...)
	}
	return string(b)
}

// DecodeSkipSpecial is Decode without the special tokens.
func (t Tokenizer) DecodeSkipSpecial(ids []int32) string {
	var b []byte
	for _, id := range ids {
		if !t.IsSpecial(id) {
			tb, _ := t.TokenBytes(id)
			b = append(b, tb...)
		}
	}
	return string(b)
}

// TokenBytes returns the bytes of one token.
func (Tokenizer) TokenBytes(id int32) ([]byte, bool) {
	switch {
	case id >= 0 && id < 256:
		return []byte{byte(id)}, true
	case id >= 256 && int(id) < 256+len(specials):
		return []byte(specials[id-256]), true
	}
	return nil, false
}

// TokenID returns the id of a special token.
func (Tokenizer) TokenID(s string) (int32, bool) {
	for i, sp := range specials {
		if sp == s {
			return 256 + int32(i), true
		}
	}
	return 0, false
}

// IsSpecial reports whether id is a special token (<think> and the tool
// call tags are not special, as in Qwen3).
func (Tokenizer) IsSpecial(id int32) bool {
	return id == EndOfText || id == IMStart || id == IMEnd
}

// ChatML renders messages the way Qwen's templates do, without tools:
// <|im_start|>role\ncontent<|im_end|>\n ..., then <|im_start|>assistant\n
// when addGenerationPrompt. With enable_thinking=false in vars it appends
// an empty think block, as Qwen3's template does.
func ChatML(messages []map[string]any, tools []map[string]any, vars map[string]any) (string, error) {
	var b strings.Builder
	if len(tools) > 0 {
		b.WriteString("<|im_start|>system\n# Tools\n")
		for _, t := range tools {
			fmt.Fprintf(&b, "%v\n", t["function"])
		}
		b.WriteString("<|im_end|>\n")
	}
	for i, m := range messages {
		role, _ := m["role"].(string)
		content, ok := m["content"].(string)
		if !ok && m["content"] != nil {
			return "", fmt.Errorf("message %d: content is not a string", i)
		}
		fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", role, content)
	}
	if gp, _ := vars["add_generation_prompt"].(bool); gp {
		b.WriteString("<|im_start|>assistant\n")
		if et, ok := vars["enable_thinking"].(bool); ok && !et {
			b.WriteString("<think>\n\n</think>\n\n")
		}
	}
	return b.String(), nil
}
