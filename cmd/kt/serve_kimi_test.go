package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/arch/deepseekv3"
)

// TestServeKimiK2Directory serves a directory laid out as Kimi-K2 ships
// (DeepseekV3ForCausalLM with one expert group, tiktoken.model,
// tokenizer_config.json and a chat_template.jinja; no tokenizer.json):
// the tokenizer loads from tiktoken.model, special tokens written in a
// prompt become their ids, and the chat API renders Kimi-K2's template
// with tools and answers.
func TestServeKimiK2Directory(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join("..", "..")
	shape := deepseekv3.SynthShape{Layers: 2, DenseLayers: 1, Hidden: 32, Heads: 2, KVLoRA: 16, Nope: 8, Rope: 4, V: 8,
		Experts: 4, TopK: 2, MoEInter: 8, Shared: 1, Dense: 16, Groups: 1, TopKGroups: 1, Vocab: 10258}
	if err := deepseekv3.WriteSynthetic(dir, shape, 3); err != nil {
		t.Fatal(err)
	}
	for dst, src := range map[string]string{
		"tiktoken.model":        filepath.Join(root, "tokenizer", "testdata", "kimi-k2", "tiktoken.model"),
		"tokenizer_config.json": filepath.Join(root, "tokenizer", "testdata", "kimi-k2", "tokenizer_config.json"),
		"chat_template.jinja":   filepath.Join(root, "chattemplate", "testdata", "templates", "moonshotai-Kimi-K2.jinja"),
	} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	url := startServe(t, "--model-path", dir, "--served-model-name", "kimi", "--log-level", "warning",
		"--tool-call-parser", "auto")
	post := func(path, body string) map[string]any {
		t.Helper()
		code, raw, err := postJSON(url+path, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, raw)
		}
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: %v: %s", path, err, raw)
		}
		return out
	}
	// "Hello<|im_end|>" is 39 6053 and the special token's id, 10002
	// (as kt tokenize and tiktoken give it).
	gen := post("/generate", `{"text":"Hello<|im_end|>","sampling_params":{"max_new_tokens":2,"temperature":0,"ignore_eos":true}}`)
	if meta, _ := gen["meta_info"].(map[string]any); meta["prompt_tokens"] != 3.0 {
		t.Errorf("/generate meta_info %v, want 3 prompt tokens", gen["meta_info"])
	}
	chat := post("/v1/chat/completions", `{"model":"kimi","max_tokens":4,"ignore_eos":true,
		"messages":[{"role":"system","content":"You are Kimi."},{"role":"user","content":"Weather in 北京?"}],
		"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`)
	usage, _ := chat["usage"].(map[string]any)
	t.Logf("chat usage %v", usage)
	if usage["completion_tokens"] != 4.0 || usage["prompt_tokens"].(float64) < 30 {
		t.Errorf("chat usage %v", usage)
	}
}
