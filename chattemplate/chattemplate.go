// Package chattemplate renders a model's chat template the way Hugging
// Face transformers' apply_chat_template does, byte for byte: the Jinja
// template from tokenizer_config.json (or chat_template.jinja) runs in
// the jinja package with the messages, tools, add_generation_prompt, the
// tokenizer's special tokens and the request's chat_template_kwargs.
package chattemplate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ktserve/kt/chattemplate/jinja"
)

// maxConfigSize bounds tokenizer_config.json (real ones are under 1 MB,
// most of it the added-token table).
const maxConfigSize = 64 << 20

// Template is a model's chat template and its special tokens. It is
// immutable and safe for concurrent use.
type Template struct {
	tmpl *jinja.Template
	// Source is the Jinja source.
	Source string
	// The special tokens from tokenizer_config.json; "" when unset.
	BOSToken, EOSToken, PADToken, UNKToken string
	// AdditionalSpecialTokens lists additional_special_tokens.
	AdditionalSpecialTokens []string
	// Limits bound each rendering; the zero value means jinja's defaults.
	Limits jinja.Limits
}

// Conversation is the input of Render, in the JSON shape of an OpenAI
// chat request plus the fields SGLang passes through. Messages, Tools and
// Documents are kept as raw JSON so that key order survives into the
// template (tojson prints keys in the order given, as Python does).
type Conversation struct {
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools,omitempty"`
	Documents           json.RawMessage `json:"documents,omitempty"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	// ChatTemplateKwargs is a JSON object of extra template variables,
	// e.g. {"enable_thinking": false}.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs,omitempty"`
}

// ErrNoTemplate is wrapped by the error Load returns when a directory has
// no chat template at all (neither chat_template.jinja nor a
// chat_template in tokenizer_config.json).
var ErrNoTemplate = errors.New("no chat template")

// SpecialTokens are the special tokens named in tokenizer_config.json;
// "" when unset.
type SpecialTokens struct {
	BOS, EOS, PAD, UNK string
	// Additional lists additional_special_tokens.
	Additional []string
}

// LoadSpecialTokens reads the special tokens of DIR/tokenizer_config.json,
// whether or not it has a chat template. A directory without the file has
// none (and no error).
func LoadSpecialTokens(dir string) (SpecialTokens, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg, err := readLimited(cfgPath, maxConfigSize)
	if errors.Is(err, os.ErrNotExist) {
		return SpecialTokens{}, nil
	}
	if err != nil {
		return SpecialTokens{}, fmt.Errorf("chattemplate: %w", err)
	}
	c, err := parseConfig(cfg)
	if err != nil {
		return SpecialTokens{}, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
	}
	return SpecialTokens{BOS: c.bos, EOS: c.eos, PAD: c.pad, UNK: c.unk, Additional: c.additional}, nil
}

// LoadFile reads a chat template from a Jinja file (as SGLang's
// --chat-template FILE.jinja) with the special tokens of dir's
// tokenizer_config.json.
func LoadFile(path, dir string) (*Template, error) {
	st, err := LoadSpecialTokens(dir)
	if err != nil {
		return nil, err
	}
	data, err := readLimited(path, jinja.MaxSourceSize)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	t, err := Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("chattemplate: %s: %w", path, err)
	}
	t.BOSToken, t.EOSToken, t.PADToken, t.UNKToken = st.BOS, st.EOS, st.PAD, st.UNK
	t.AdditionalSpecialTokens = st.Additional
	return t, nil
}

// Load reads the chat template of a model directory: chat_template.jinja
// when present (it takes precedence, as in transformers), else the
// chat_template field of tokenizer_config.json. Special tokens come from
// tokenizer_config.json when it exists.
func Load(dir string) (*Template, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg, err := readLimited(cfgPath, maxConfigSize)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	var c tokenizerConfig
	if cfg != nil {
		if c, err = parseConfig(cfg); err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
		}
	}
	src := c.template
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	data, err := readLimited(jinjaPath, jinja.MaxSourceSize)
	switch {
	case err == nil:
		src = string(data)
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("chattemplate: %w", err)
	case cfg == nil:
		return nil, fmt.Errorf("chattemplate: %s has neither chat_template.jinja nor tokenizer_config.json: %w", dir, ErrNoTemplate)
	case src == "":
		return nil, fmt.Errorf("chattemplate: %s: no chat_template, and no chat_template.jinja beside it: %w", cfgPath, ErrNoTemplate)
	}
	t, err := Parse(src)
	if err != nil {
		if data != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", jinjaPath, err)
		}
		return nil, fmt.Errorf("chattemplate: %s: chat_template: %w", cfgPath, err)
	}
	t.BOSToken, t.EOSToken, t.PADToken, t.UNKToken = c.bos, c.eos, c.pad, c.unk
	t.AdditionalSpecialTokens = c.additional
	return t, nil
}

// Parse compiles a chat template source.
func Parse(src string) (*Template, error) {
	tm, err := jinja.Parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{tmpl: tm, Source: src}, nil
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}

type tokenizerConfig struct {
	template           string
	bos, eos, pad, unk string
	additional         []string
}

// parseConfig reads the fields of tokenizer_config.json this package
// needs. chat_template is a string or a list of {name, template}, of
// which the one named "default" is used, as in transformers.
func parseConfig(data []byte) (tokenizerConfig, error) {
	var raw struct {
		ChatTemplate json.RawMessage   `json:"chat_template"`
		BOS          json.RawMessage   `json:"bos_token"`
		EOS          json.RawMessage   `json:"eos_token"`
		PAD          json.RawMessage   `json:"pad_token"`
		UNK          json.RawMessage   `json:"unk_token"`
		Additional   []json.RawMessage `json:"additional_special_tokens"`
	}
	var c tokenizerConfig
	if err := json.Unmarshal(data, &raw); err != nil {
		return c, fmt.Errorf("invalid JSON: %w", err)
	}
	if len(raw.ChatTemplate) > 0 && string(raw.ChatTemplate) != "null" {
		if err := json.Unmarshal(raw.ChatTemplate, &c.template); err != nil {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err2 := json.Unmarshal(raw.ChatTemplate, &named); err2 != nil {
				return c, errors.New("chat_template: want a string or a list of {name, template}")
			}
			found := false
			for _, n := range named {
				if n.Name == "default" {
					c.template, found = n.Template, true
				}
			}
			if !found {
				return c, errors.New("chat_template: the list has no template named \"default\"")
			}
		}
	}
	var err error
	fields := []struct {
		name string
		raw  json.RawMessage
		dst  *string
	}{{"bos_token", raw.BOS, &c.bos}, {"eos_token", raw.EOS, &c.eos}, {"pad_token", raw.PAD, &c.pad}, {"unk_token", raw.UNK, &c.unk}}
	for _, f := range fields {
		if *f.dst, err = tokenString(f.raw); err != nil {
			return c, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	for i, a := range raw.Additional {
		s, err := tokenString(a)
		if err != nil {
			return c, fmt.Errorf("additional_special_tokens[%d]: %w", i, err)
		}
		c.additional = append(c.additional, s)
	}
	return c, nil
}

// tokenString reads a special token: a string, null, or an AddedToken
// object with a "content" field.
func tokenString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", errors.New("want a string or an object with \"content\"")
	}
	return *obj.Content, nil
}

// Render renders a conversation.
func (t *Template) Render(c Conversation) (string, error) {
	return t.RenderContext(context.Background(), c)
}

// RenderContext renders a conversation, stopping when ctx is done.
// The variables are those transformers passes: messages, tools (None when
// absent), documents, add_generation_prompt, the special tokens that are
// set (bos_token, eos_token, pad_token, unk_token,
// additional_special_tokens) and then the chat_template_kwargs, which may
// override any of them.
func (t *Template) RenderContext(ctx context.Context, c Conversation) (string, error) {
	vars := map[string]jinja.Value{}
	for name, tok := range map[string]string{"bos_token": t.BOSToken, "eos_token": t.EOSToken, "pad_token": t.PADToken, "unk_token": t.UNKToken} {
		if tok != "" {
			vars[name] = tok
		}
	}
	if len(t.AdditionalSpecialTokens) > 0 {
		l := jinja.NewList()
		for _, s := range t.AdditionalSpecialTokens {
			l.Items = append(l.Items, s)
		}
		vars["additional_special_tokens"] = l
	}
	if len(c.Messages) == 0 {
		return "", errors.New("chattemplate: no messages")
	}
	var err error
	if vars["messages"], err = jsonField("messages", c.Messages); err != nil {
		return "", err
	}
	if _, ok := vars["messages"].(*jinja.List); !ok {
		return "", errors.New("chattemplate: messages: want an array")
	}
	if vars["tools"], err = jsonField("tools", c.Tools); err != nil {
		return "", err
	}
	if vars["documents"], err = jsonField("documents", c.Documents); err != nil {
		return "", err
	}
	vars["add_generation_prompt"] = c.AddGenerationPrompt
	if len(c.ChatTemplateKwargs) > 0 && string(c.ChatTemplateKwargs) != "null" {
		kw, err := jinja.FromJSON(c.ChatTemplateKwargs)
		if err != nil {
			return "", fmt.Errorf("chattemplate: chat_template_kwargs: %w", err)
		}
		d, ok := kw.(*jinja.Dict)
		if !ok {
			return "", errors.New("chattemplate: chat_template_kwargs: want an object")
		}
		for _, k := range d.Keys() {
			v, _ := d.Get(k)
			vars[k.(string)] = v
		}
	}
	out, err := t.tmpl.Render(ctx, vars, jinja.Options{Limits: t.Limits})
	if err != nil {
		return "", fmt.Errorf("chattemplate: %w", err)
	}
	return out, nil
}

func jsonField(name string, raw json.RawMessage) (jinja.Value, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	v, err := jinja.FromJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: %s: %w", name, err)
	}
	return v, nil
}
