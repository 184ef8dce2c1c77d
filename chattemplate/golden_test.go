package chattemplate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type goldenCase struct {
	Template            string          `json:"template"`
	Conversation        string          `json:"conversation"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	Output              *string         `json:"output"`
	Error               *string         `json:"error"`
}

type conversation struct {
	Name     string          `json:"name"`
	Messages json.RawMessage `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func loadTemplate(t *testing.T, name string) *Template {
	t.Helper()
	if dir, ok := strings.CutSuffix(name, "/tokenizer_config.json"); ok {
		tm, err := Load(filepath.Join("testdata", dir))
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	src, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := Parse(string(src))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	// The golden file was rendered with the Qwen3 tokenizer's special tokens.
	tm.EOSToken, tm.PADToken = "<|im_end|>", "<|endoftext|>"
	return tm
}

// TestGolden renders every template over every conversation and compares
// with Python Jinja2 configured as transformers' apply_chat_template
// (testdata/gen/gen_golden.py). Cases where the reference raised must
// fail here too.
func TestGolden(t *testing.T) {
	var g struct {
		Cases []goldenCase `json:"cases"`
	}
	readJSON(t, "golden.json", &g)
	var convs struct {
		Conversations []conversation `json:"conversations"`
	}
	readJSON(t, "conversations.json", &convs)
	byName := map[string]conversation{}
	for _, c := range convs.Conversations {
		byName[c.Name] = c
	}
	templates := map[string]*Template{}
	if len(g.Cases) < 100 {
		t.Fatalf("only %d golden cases", len(g.Cases))
	}
	for _, c := range g.Cases {
		tm, ok := templates[c.Template]
		if !ok {
			tm = loadTemplate(t, c.Template)
			templates[c.Template] = tm
		}
		conv, ok := byName[c.Conversation]
		if !ok {
			t.Fatalf("no conversation %q", c.Conversation)
		}
		in := Conversation{Messages: conv.Messages, Tools: conv.Tools, AddGenerationPrompt: c.AddGenerationPrompt, ChatTemplateKwargs: c.ChatTemplateKwargs}
		name := c.Template + "/" + c.Conversation + "/agp=" + map[bool]string{true: "1", false: "0"}[c.AddGenerationPrompt] + "/" + string(c.ChatTemplateKwargs)
		got, err := tm.Render(in)
		switch {
		case c.Error != nil:
			if err == nil {
				t.Errorf("%s: rendered, want an error like %q", name, *c.Error)
			}
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case got != *c.Output:
			t.Errorf("%s:\n got %q\nwant %q", name, got, *c.Output)
		}
	}
}
