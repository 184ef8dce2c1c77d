package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/lora"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
	"github.com/ktserve/kt/tokenizer"
)

const loraNewTokens = 10

// loraReference decodes each prompt greedily with the model wholly in
// process, every sequence with adapter id ad (0: base + the static expert
// LoRA, 1: also the non-expert LoRA), ignoring EOS.
func loraReference(t *testing.T, modelDir, adapterDir string, prompts [][]int32, ad int) [][]int32 {
	t.Helper()
	set, err := lora.Open(lora.Flags{LoRAPaths: []string{"neko=" + adapterDir}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := arch.Load(modelDir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 128, MaxBatchTokens: 64, Threads: 2, Device: "cpu", LoRA: set})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out [][]int32
	for _, p := range prompts {
		r.Free(0)
		toks, pos := p, 0
		var gen []int32
		for len(gen) < loraNewTokens {
			if err := r.Reserve(0, len(toks)); err != nil {
				t.Fatal(err)
			}
			var lg model.Logits
			if err := r.Forward(&model.Batch{Chunks: []model.Chunk{{Slot: 0, Pos: pos, Tokens: toks, Adapter: ad}}}, &lg); err != nil {
				t.Fatal(err)
			}
			row := lg.Rows[0][len(lg.Rows[0])-1]
			next := 0
			for v := range row {
				if row[v] > row[next] {
					next = v
				}
			}
			pos += len(toks)
			toks = []int32{int32(next)}
			gen = append(gen, int32(next))
		}
		out = append(out, gen)
	}
	return out
}

// TestServeLoRA serves the tiny Qwen3.5 MoE with its merged KT adapter
// (--enable-lora --lora-paths neko=DIR) and talks to it with the OpenAI
// client: base (model=tiny) and adapter (model=tiny:neko) requests sent
// concurrently, so steps mix them, each greedy answer equal to the in-process
// reference for its adapter; an unknown adapter is a 400 in SGLang-KT's words
// and the next request is served; native /generate selects the adapter by
// lora_path; /v1/models lists the adapter as SGLang does.
func TestServeLoRA(t *testing.T) {
	root := filepath.Join("..", "..")
	modelDir := filepath.Join(root, "testdata", "models", "qwen35moe-b")
	adapterDir := filepath.Join(root, "adapter", "ktconvert", "testdata", "tiny_qwen35", "merged")
	tokDir := filepath.Join(root, "testdata", "tokenizers", "qwen3-tiny1000")
	for _, p := range []string{modelDir, adapterDir, tokDir} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("fixture missing: %v", err)
		}
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Once upon a time", "The capital of France is", "1, 2, 3,"}
	var prompts [][]int32
	for _, s := range texts {
		prompts = append(prompts, tok.Encode(s))
	}
	ref := [][][]int32{loraReference(t, modelDir, adapterDir, prompts, 0), loraReference(t, modelDir, adapterDir, prompts, 1)}
	if slices.EqualFunc(ref[0], ref[1], slices.Equal) {
		t.Fatalf("the adapter does not change any greedy answer (%v): the test would not tell them apart", ref[0])
	}

	url := startServe(t, "--model-path", modelDir, "--tokenizer-path", tokDir, "--served-model-name", "tiny",
		"--enable-lora", "--lora-paths", "neko="+adapterDir, "--max-running-requests", "8", "--log-level", "warning")
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = url + "/v1"
	client := openai.NewClientWithConfig(cfg)
	ctx := context.Background()

	type answer struct {
		text   string
		n      int
		finish string
		err    error
	}
	names := []string{"tiny", "tiny:neko"}
	got := make([][]answer, 2)
	var wg sync.WaitGroup
	for a := range names {
		got[a] = make([]answer, len(texts))
		for i := range texts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.CreateCompletion(ctx, openai.CompletionRequest{Model: names[a], Prompt: texts[i],
					MaxTokens: loraNewTokens, Temperature: 1e-7})
				if err == nil && len(resp.Choices) != 1 {
					err = fmt.Errorf("%d choices", len(resp.Choices))
				}
				if err != nil {
					got[a][i] = answer{err: err}
					return
				}
				got[a][i] = answer{text: resp.Choices[0].Text, n: resp.Usage.CompletionTokens, finish: resp.Choices[0].FinishReason}
			}()
		}
	}
	wg.Wait()
	for a := range names {
		for i, g := range got[a] {
			if g.err != nil {
				t.Errorf("model=%s prompt %q: %v", names[a], texts[i], g.err)
				continue
			}
			want := ref[a][i]
			t.Logf("model=%s prompt %q: %q (%d tokens, %s)", names[a], texts[i], g.text, g.n, g.finish)
			// A greedy answer may stop early at EOS; the text must be the
			// reference's first n tokens and, when cut short, the next
			// reference token must be a special token.
			if g.n < 1 || g.n > len(want) || (g.finish == "length") != (g.n == len(want)) ||
				(g.n < len(want) && !tok.IsSpecial(want[g.n]) && want[g.n] != 2) {
				t.Errorf("model=%s prompt %q: %d tokens, finish %q; reference %v", names[a], texts[i], g.n, g.finish, want)
				continue
			}
			if w := tok.DecodeSkipSpecial(want[:g.n]); g.text != w {
				t.Errorf("model=%s prompt %q: %q, reference %q", names[a], texts[i], g.text, w)
			}
		}
	}

	// An adapter never loaded: 400 in SGLang-KT's words; the server goes on.
	_, err = client.CreateCompletion(ctx, openai.CompletionRequest{Model: "tiny:lora0", Prompt: texts[0], MaxTokens: 2})
	var ae *openai.APIError
	if !errors.As(err, &ae) || ae.HTTPStatusCode != 400 || !strings.Contains(ae.Message, "Got LoRA adapter that has never been loaded: lora0") {
		t.Errorf("unknown adapter: %v", err)
	}
	_, err = client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "tiny:lora0",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}, MaxTokens: 2})
	if !errors.As(err, &ae) || ae.HTTPStatusCode != 400 || !strings.Contains(ae.Message, "Got LoRA adapter that has never been loaded: lora0") {
		t.Errorf("unknown adapter (chat): %v", err)
	}
	resp, err := client.CreateCompletion(ctx, openai.CompletionRequest{Model: "tiny:neko", Prompt: texts[1], MaxTokens: loraNewTokens, Temperature: 1e-7})
	if err != nil || len(resp.Choices) != 1 || resp.Choices[0].Text != got[1][1].text {
		t.Errorf("after the refusal: %+v %v, want %q", resp, err, got[1][1].text)
	}

	// Native /generate: lora_path names the adapter (SGLang), one for all
	// prompts or one (or null) per prompt; the output ids equal the
	// references exactly.
	gen := func(body map[string]any) (int, []byte) {
		t.Helper()
		body["sampling_params"] = map[string]any{"max_new_tokens": loraNewTokens, "temperature": 0, "ignore_eos": true}
		raw, _ := json.Marshal(body)
		code, out, err := postJSON(url+"/generate", raw)
		if err != nil {
			t.Fatal(err)
		}
		return code, out
	}
	var one struct {
		OutputIDs []int32 `json:"output_ids"`
	}
	if code, raw := gen(map[string]any{"input_ids": prompts[0], "lora_path": "neko"}); code != 200 || json.Unmarshal(raw, &one) != nil || !slices.Equal(one.OutputIDs, ref[1][0]) {
		t.Errorf("/generate lora_path neko: %d %s, want ids %v", code, raw, ref[1][0])
	}
	var many []struct {
		OutputIDs []int32 `json:"output_ids"`
	}
	if code, raw := gen(map[string]any{"input_ids": prompts[:2], "lora_path": []any{nil, "neko"}}); code != 200 || json.Unmarshal(raw, &many) != nil ||
		len(many) != 2 || !slices.Equal(many[0].OutputIDs, ref[0][0]) || !slices.Equal(many[1].OutputIDs, ref[1][1]) {
		t.Errorf("/generate lora_path [null, neko]: %d %s, want ids %v and %v", code, raw, ref[0][0], ref[1][1])
	}
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"input_ids": prompts[0], "lora_path": "lora0"}, "Got LoRA adapter that has never been loaded: lora0"},
		{map[string]any{"input_ids": prompts[:2], "lora_path": []any{"neko"}}, "1 lora_path entries for 2 prompts"},
		{map[string]any{"input_ids": prompts[0], "lora_path": 3}, `field \"lora_path\": expected an adapter name`},
	} {
		if code, raw := gen(c.body); code != 400 || !strings.Contains(string(raw), c.want) {
			t.Errorf("/generate %v: %d %s, want 400 %q", c.body["lora_path"], code, raw, c.want)
		}
	}

	// /v1/models: the served model, then each adapter (SGLang: id NAME,
	// root its path, parent the served model).
	ml, err := client.ListModels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Models) != 2 || ml.Models[0].ID != "tiny" || ml.Models[1].ID != "neko" || ml.Models[1].Root != adapterDir || ml.Models[1].Parent != "tiny" {
		t.Errorf("/v1/models: %+v", ml.Models)
	}
}

// TestServeRefusesUnsafeLoRA: an adapter that would break every request
// (a NaN factor, an overflowing lora_alpha) or that kt would serve wrongly
// (DoRA) stops kt serve at startup with an error naming the cause, before
// the model is loaded or a port is opened.
func TestServeRefusesUnsafeLoRA(t *testing.T) {
	root := filepath.Join("..", "..")
	modelDir := filepath.Join(root, "testdata", "models", "qwen35moe-b")
	adapterDir := filepath.Join(root, "adapter", "ktconvert", "testdata", "tiny_qwen35", "merged")
	tokDir := filepath.Join(root, "testdata", "tokenizers", "qwen3-tiny1000")
	for _, p := range []string{modelDir, adapterDir, tokDir} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("fixture missing: %v", err)
		}
	}
	cfgJSON, err := os.ReadFile(filepath.Join(adapterDir, "adapter_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	// poisonedCopy copies the fixture adapter, editing its config and
	// setting the first element of tensor nan (when not "") to NaN.
	poisonedCopy := func(t *testing.T, edit func(string) string, nan string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(edit(string(cfgJSON))), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := safetensors.Open(filepath.Join(adapterDir, "adapter_model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var ts []safetensors.Tensor
		for _, ti := range f.Tensors() {
			src, err := f.Tensor(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			data := slices.Clone(src.Data)
			if ti.Name == nan {
				nanBits := []byte{0xc0, 0x7f} // bf16 NaN, little-endian
				if ti.DType == tensor.F32 {
					nanBits = []byte{0, 0, 0xc0, 0x7f}
				}
				copy(data, nanBits)
			}
			ts = append(ts, safetensors.Tensor{TensorInfo: ti, Data: data})
		}
		if err := safetensors.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	same := func(s string) string { return s }
	f, err := safetensors.Open(filepath.Join(adapterDir, "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var nonExpert, expert string
	for _, ti := range f.Tensors() {
		if strings.Contains(ti.Name, ".mlp.experts.") {
			expert = ti.Name
		} else {
			nonExpert = ti.Name
		}
	}
	f.Close()
	for _, c := range []struct {
		name string
		dir  string
		want []string
	}{
		{"NaN non-expert factor", poisonedCopy(t, same, nonExpert), []string{"tensor " + nonExpert + ": element 0 is NaN"}},
		{"NaN expert factor", poisonedCopy(t, same, expert), []string{"tensor " + expert + ": element 0 is NaN"}},
		{"lora_alpha 1e308", poisonedCopy(t, func(s string) string {
			return strings.Replace(s, `"lora_alpha": 16.0`, `"lora_alpha": 1e308`, 1)
		}, ""), []string{"adapter_config.json: scaling 1.25e+307 (lora_alpha 1e+308, r 8) is outside (0, 10000]"}},
		{"use_dora", poisonedCopy(t, func(s string) string {
			return strings.Replace(s, `"bias": "none",`, `"bias": "none", "use_dora": true,`, 1)
		}, ""), []string{"use_dora is set (true): DoRA"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var logs bytes.Buffer
			err := runServe(ctx, []string{"--port", "0", "--model-path", modelDir, "--tokenizer-path", tokDir,
				"--enable-lora", "--lora-paths", "neko=" + c.dir, "--log-level", "warning"}, io.Discard, &logs,
				func(addr string) { t.Errorf("kt serve listens on %s with an unsafe adapter", addr); cancel() })
			if err == nil {
				t.Fatal("kt serve started")
			}
			for _, w := range append(c.want, "lora adapter "+c.dir) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not mention %q", err, w)
				}
			}
		})
	}
}
