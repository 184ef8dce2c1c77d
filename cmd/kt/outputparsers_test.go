package main

import (
	"testing"

	"github.com/ktserve/kt/serveconfig"
)

// TestOutputParsersAuto: auto parsers follow the chat template's source.
func TestOutputParsersAuto(t *testing.T) {
	for _, tc := range []struct{ src, reasoning, tools string }{
		{"plain", "none", "none"},
		{"<think> <tool_call>{...}</tool_call>", "qwen3", "qwen25"},
		{"<tool_call>\n<function=NAME>\n<parameter=P>", "none", "qwen3_coder"},
	} {
		cfg := &serveconfig.Config{ReasoningParser: "auto", ToolCallParser: "auto"}
		r, tools := outputParsers(cfg, tc.src)
		if r != tc.reasoning || tools != tc.tools {
			t.Errorf("%q: %s, %s; want %s, %s", tc.src, r, tools, tc.reasoning, tc.tools)
		}
	}
}
