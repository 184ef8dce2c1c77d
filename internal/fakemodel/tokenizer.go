package fakemodel

import (
	"fmt"
	"strings"

	"github.com/ktserve/kt/chattemplate"
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

// chatML is a ChatML chat template in the manner of Qwen's: tools as a
// system block of their functions' JSON, <|im_start|>role\ncontent<|im_end|>
// per message, then <|im_start|>assistant\n with add_generation_prompt, and
// an empty think block when enable_thinking is false.
const chatML = `{%- if tools %}{{ "<|im_start|>system\n# Tools\n" }}{% for t in tools %}{{ t.function | tojson + "\n" }}{% endfor %}{{ "<|im_end|>\n" }}{% endif %}` +
	`{%- for m in messages %}{{ "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n" }}{% endfor %}` +
	`{%- if add_generation_prompt %}{{ "<|im_start|>assistant\n" }}{% if enable_thinking is defined and not enable_thinking %}{{ "<think>\n\n</think>\n\n" }}{% endif %}{% endif %}`

// ChatTemplate returns the ChatML template for the byte-level Tokenizer.
func ChatTemplate() *chattemplate.Template {
	t, err := chattemplate.Parse(chatML)
	if err != nil {
		panic(fmt.Sprintf("fakemodel: the ChatML template does not parse: %v", err)) // a bug in this file
	}
	return t
}
