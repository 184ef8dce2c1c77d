package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/chattemplate/jinja"
)

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoad(t *testing.T) {
	msgs := Conversation{Messages: []byte(`[{"role":"user","content":"hi"}]`)}
	for _, c := range []struct {
		name  string
		files map[string]string
		want  string // rendering, or error substring prefixed with "ERR "
	}{
		{"string template", map[string]string{"tokenizer_config.json": `{"chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}", "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"}`}, "<s>hi</s>"},
		{"named templates", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ messages|length }}"}]}`}, "D1"},
		{"jinja file wins", map[string]string{"tokenizer_config.json": `{"chat_template": "config", "eos_token": "E"}`, "chat_template.jinja": "file {{ eos_token }}\n"}, "file E"},
		{"jinja file alone", map[string]string{"chat_template.jinja": "only {{ messages[0].role }}"}, "only user"},
		{"no template", map[string]string{"tokenizer_config.json": `{"eos_token": "E"}`}, "ERR no chat_template"},
		{"empty dir", map[string]string{}, "ERR neither"},
		{"bad json", map[string]string{"tokenizer_config.json": `{`}, "ERR invalid JSON"},
		{"bad template type", map[string]string{"tokenizer_config.json": `{"chat_template": 5}`}, "ERR chat_template: want a string"},
		{"no default", map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "x", "template": "T"}]}`}, `ERR no template named "default"`},
		{"bad token", map[string]string{"tokenizer_config.json": `{"chat_template": "x", "eos_token": 5}`}, "ERR eos_token"},
		{"syntax error", map[string]string{"tokenizer_config.json": `{"chat_template": "{% if %}"}`}, "ERR chat_template: line 1"},
		{"include refused", map[string]string{"chat_template.jinja": `{% include "tokenizer_config.json" %}`}, "ERR not allowed"},
	} {
		tm, err := Load(writeDir(t, c.files))
		var got string
		if err == nil {
			got, err = tm.Render(msgs)
		}
		if err != nil {
			got = "ERR " + err.Error()
		}
		if want, isErr := strings.CutPrefix(c.want, "ERR "); isErr {
			if !strings.Contains(got, want) {
				t.Errorf("%s: got %q, want an error containing %q", c.name, got, want)
			}
		} else if got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

func TestRenderInputs(t *testing.T) {
	tm, err := Parse(`{{ messages|length }}|{{ tools is none }}|{{ enable_thinking }}|{{ add_generation_prompt }}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tm.Render(Conversation{Messages: []byte(`[{"role":"user","content":"x"}]`), AddGenerationPrompt: true, ChatTemplateKwargs: []byte(`{"enable_thinking": false}`)})
	if err != nil || got != "1|True|False|True" {
		t.Fatalf("got %q, %v", got, err)
	}
	for _, c := range []Conversation{
		{},
		{Messages: []byte(`{"role":"user"}`)},
		{Messages: []byte(`[`)},
		{Messages: []byte(`[]`), ChatTemplateKwargs: []byte(`[1]`)},
		{Messages: []byte(`[]`), Tools: []byte(`{"a":`)},
	} {
		if _, err := tm.Render(c); err == nil {
			t.Errorf("no error for %+v", c)
		}
	}
	raise, _ := Parse(`{{ raise_exception("No user query found in messages.") }}`)
	_, err = raise.Render(Conversation{Messages: []byte(`[]`)})
	if !errors.Is(err, jinja.ErrRaised) || !strings.Contains(err.Error(), "No user query") {
		t.Fatalf("raise: %v", err)
	}
}

func TestNoTemplateIsErrNoTemplate(t *testing.T) {
	for _, files := range []map[string]string{{"tokenizer_config.json": `{"eos_token": "E"}`}, {}} {
		if _, err := Load(writeDir(t, files)); !errors.Is(err, ErrNoTemplate) {
			t.Errorf("%v: error %v, want ErrNoTemplate", files, err)
		}
	}
	if _, err := Load(writeDir(t, map[string]string{"tokenizer_config.json": `{"chat_template": "{% if %}"}`})); errors.Is(err, ErrNoTemplate) {
		t.Errorf("a broken template is not a missing one: %v", err)
	}
}

func TestLoadSpecialTokens(t *testing.T) {
	dir := writeDir(t, map[string]string{"tokenizer_config.json": `{"eos_token": {"content": "<|im_end|>"}, "bos_token": null, "pad_token": "<|endoftext|>", "additional_special_tokens": ["<a>", {"content": "<b>"}]}`})
	st, err := LoadSpecialTokens(dir)
	if err != nil || st.EOS != "<|im_end|>" || st.BOS != "" || st.PAD != "<|endoftext|>" || strings.Join(st.Additional, ",") != "<a>,<b>" {
		t.Errorf("got %+v, %v", st, err)
	}
	if st, err := LoadSpecialTokens(t.TempDir()); err != nil || st.EOS != "" {
		t.Errorf("empty dir: %+v, %v", st, err)
	}
	if _, err := LoadSpecialTokens(writeDir(t, map[string]string{"tokenizer_config.json": `{"eos_token": 3}`})); err == nil || !strings.Contains(err.Error(), "eos_token") {
		t.Errorf("bad eos_token: %v", err)
	}
}

func TestLoadFile(t *testing.T) {
	dir := writeDir(t, map[string]string{"tokenizer_config.json": `{"chat_template": "config", "eos_token": "E"}`, "custom.jinja": "custom {{ messages[0].content }}{{ eos_token }}"})
	tm, err := LoadFile(filepath.Join(dir, "custom.jinja"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tm.Render(Conversation{Messages: []byte(`[{"role":"user","content":"hi"}]`)}); err != nil || got != "custom hiE" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.jinja"), dir); err == nil || !strings.Contains(err.Error(), "missing.jinja") {
		t.Errorf("missing file: %v", err)
	}
	bad := writeDir(t, map[string]string{"bad.jinja": "{% for %}"})
	if _, err := LoadFile(filepath.Join(bad, "bad.jinja"), bad); err == nil || !strings.Contains(err.Error(), "bad.jinja") {
		t.Errorf("bad file: %v", err)
	}
}
