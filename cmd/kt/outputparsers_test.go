package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/serveconfig"
)

// TestOutputParsersAuto: auto parsers follow the chat template's source.
func TestOutputParsersAuto(t *testing.T) {
	for _, tc := range []struct{ src, reasoning, tools string }{
		{"plain", "none", "none"},
		{"<think> <tool_call>{...}</tool_call>", "qwen3", "qwen25"},
		{"<tool_call>\n<function=NAME>\n<parameter=P>", "none", "qwen3_coder"},
		{"◁think▷", "kimi", "none"},
	} {
		cfg := &serveconfig.Config{ReasoningParser: "auto", ToolCallParser: "auto"}
		r, tools := outputParsers(cfg, tc.src)
		if r != tc.reasoning || tools != tc.tools {
			t.Errorf("%q: %s, %s; want %s, %s", tc.src, r, tools, tc.reasoning, tc.tools)
		}
	}
}

// TestOutputParsersAutoRealTemplates: the models' own chat templates pick
// SGLang's parsers for those models.
func TestOutputParsersAutoRealTemplates(t *testing.T) {
	td := filepath.Join("..", "..", "chattemplate", "testdata")
	for _, tc := range []struct{ file, reasoning, tools string }{
		{"qwen3/tokenizer_config.json", "qwen3", "qwen25"},
		{"templates/Qwen3-Coder.jinja", "none", "qwen3_coder"},
		{"deepseek-v3/tokenizer_config.json", "none", "deepseekv3"},
		{"templates/DeepSeek-R1-0528.jinja", "deepseek-r1", "deepseekv3"},
		{"templates/deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", "deepseek-r1", "deepseekv3"},
		{"templates/DeepSeek-V3.1.jinja", "deepseek-v3", "deepseekv31"},
		{"templates/deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-v3", "deepseekv31"},
		{"templates/moonshotai-Kimi-K2.jinja", "none", "kimi_k2"},
		{"templates/Kimi-K2-Instruct.jinja", "none", "kimi_k2"},
		{"templates/Kimi-K2-Thinking.jinja", "kimi_k2", "kimi_k2"},
	} {
		data, err := os.ReadFile(filepath.Join(td, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		src := string(data)
		if filepath.Base(tc.file) == "tokenizer_config.json" {
			var cfg struct {
				ChatTemplate string `json:"chat_template"`
			}
			if err := json.Unmarshal(data, &cfg); err != nil {
				t.Fatal(err)
			}
			src = cfg.ChatTemplate
		}
		r, tools := outputParsers(&serveconfig.Config{ReasoningParser: "auto", ToolCallParser: "auto"}, src)
		if r != tc.reasoning || tools != tc.tools {
			t.Errorf("%s: %s, %s; want %s, %s", tc.file, r, tools, tc.reasoning, tc.tools)
		}
	}
}
