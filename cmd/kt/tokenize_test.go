package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTokenize(t *testing.T) {
	dir := filepath.Join("..", "..", "tokenizer", "testdata")
	conv := filepath.Join(t.TempDir(), "conv.json")
	if err := os.WriteFile(conv, []byte(`{"messages":[{"role":"user","content":"你好 🤖 func main(){}"}],"add_generation_prompt":true,"chat_template_kwargs":{"enable_thinking":false}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"stdin", "你好，世界！", []string{"tokenize", "--tokenizer-path", dir}, "108386 3837 99489 6313\n"},
		{"decode", "", []string{"tokenize", "--tokenizer-path", dir, "--decode", "[9707, 11, 151645]"}, "Hello,<|im_end|>\n"},
		// Kimi-K2's tiktoken tokenizer (tokenizer/testdata/kimi-k2: its
		// pattern and special tokens over 10,000 o200k_base ranks).
		{"tiktoken", "Hello<|im_end|>", []string{"tokenize", "--tokenizer-path", filepath.Join(dir, "kimi-k2")}, "39 6053 10002\n"},
		// The ids Hugging Face gives for this chat (shared/reference/test-assets.md §2).
		{"chat", "", []string{"tokenize", "--tokenizer-path", dir, "--chat", conv}, "---\n151644 872 198 108386 11162 97 244 2915 1887 368 6257 151645 198 151644 77091 198 151667 271 151668 271\n"},
	} {
		got, err := runCLIInput(t, c.stdin, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !strings.HasSuffix(got, c.want) {
			t.Errorf("%s: got %q, want suffix %q", c.name, got, c.want)
		}
	}
	if _, err := runCLIInput(t, "", "tokenize", "x"); err == nil {
		t.Error("no error without --tokenizer-path")
	}
	if _, err := parseIDs("1 x"); err == nil {
		t.Error("no error for a bad id")
	}
}
