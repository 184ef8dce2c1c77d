package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/qwen3moe"
	"github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/perplexity"
	"github.com/ktserve/kt/tokenizer"
)

// byteTokenizerJSON is a byte-level BPE tokenizer.json with no merges: each
// byte is its own token, ids 0-255 in byte order, and <|endoftext|> is
// 256, so that any text encodes to ids a 300-token test model takes.
func byteTokenizerJSON(t *testing.T) []byte {
	t.Helper()
	// GPT-2's byte-to-character map: printable Latin-1 bytes stand for
	// themselves, the others for 256, 257, ... in byte order
	vocab := map[string]int{}
	next := 256
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(next)
			next++
		}
		vocab[string(r)] = b
	}
	pattern := `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	doc := map[string]any{
		"added_tokens": []map[string]any{{"id": 256, "content": "<|endoftext|>", "special": true}},
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// evalModel writes a synthetic Qwen3-MoE model the CPU expert engine
// takes (hidden 128, moe_intermediate 128, vocabulary 300) with the byte
// tokenizer, and a text file to score; it returns both paths.
func evalModel(t *testing.T) (dir, data string) {
	t.Helper()
	dir = t.TempDir()
	shape := qwen3moe.SynthShape{Layers: 2, Hidden: 128, Heads: 4, KVHeads: 2, HeadDim: 32, Experts: 8, TopK: 2, MoEInter: 128, Vocab: 300, Exp: 123}
	if err := qwen3moe.WriteSynthetic(dir, shape, 5); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), byteTokenizerJSON(t), 0o644); err != nil {
		t.Fatal(err)
	}
	data = filepath.Join(t.TempDir(), "text.txt")
	text := "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n    return a + b\n\nprint(add(2, 3))\n"
	if err := os.WriteFile(data, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, data
}

type evalJSON struct {
	perplexity.Result
	Type string `json:"type"`
}

func runEvalJSON(t *testing.T, args ...string) evalJSON {
	t.Helper()
	stdout, stderr, err := runKT(t, append([]string{"eval", "--json", "--threads", "2"}, args...)...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, stderr)
	}
	var got evalJSON
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	return got
}

// TestEval checks kt eval against perplexity.Score on the same ids and
// runner options, on the backend's MoE op and, where this build has it,
// through the CPU expert engine (--kt-method BF16), and the plain output.
func TestEval(t *testing.T) {
	dir, data := evalModel(t)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(data)
	ids := tok.Encode(string(text))
	r, err := arch.Load(dir, arch.Options{MaxSeqs: 1, MaxTotalTokens: 256, MaxBatchTokens: 32, Threads: 2, Device: "cpu", Experts: "backend"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := perplexity.Score(r, ids, perplexity.Options{Ctx: 32})
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := runEvalJSON(t, "--model-path", dir, "--data", data, "--ctx", "32", "--device", "cpu", "--experts", "backend")
	if got.Type != "perplexity" || got.InputTokens != len(ids) || got.Tokens != want.Tokens || got.Windows != want.Windows || got.NLL != want.NLL {
		t.Errorf("kt eval %+v, perplexity.Score %+v", got, want)
	}
	if math.Abs(got.Perplexity-math.Exp(got.NLL)) > 1e-9*got.Perplexity {
		t.Errorf("perplexity %v, exp(NLL) %v", got.Perplexity, math.Exp(got.NLL))
	}
	if len(cpuExpertMethods()) > 0 {
		eng := runEvalJSON(t, "--model-path", dir, "--data", data, "--ctx", "32", "--device", "cpu", "--kt-method", "BF16",
			"--kt-weight-path", dir, "--kt-cpuinfer", "2", "--kt-threadpool-count", "1")
		if eng.Tokens != want.Tokens || math.Abs(eng.NLL-want.NLL) > 0.01 {
			t.Errorf("--kt-method BF16: %d tokens NLL %.6f; reference op %d tokens NLL %.6f", eng.Tokens, eng.NLL, want.Tokens, want.NLL)
		}
	}
	out, err := runCLI(t, "eval", "--model-path", dir, "--data", data, "--ctx", "32", "--device", "cpu", "--threads", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"tokens ", "nll ", "perplexity ", "time "} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestEvalErrors(t *testing.T) {
	dir, data := evalModel(t)
	empty := filepath.Join(t.TempDir(), "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	noTok := fixtures.Dir("qwen3moe-a")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model-path", dir}, "--data is required"},
		{[]string{"--data", data}, "--model-path is required"},
		{[]string{"--model-path", dir, "--data", filepath.Join(dir, "missing.txt")}, "no such file"},
		{[]string{"--model-path", dir, "--data", empty}, "nothing to score"},
		{[]string{"--model-path", dir, "--data", data, "--type", "accuracy"}, "want perplexity"},
		{[]string{"--model-path", dir, "--data", data, "--ctx", "1"}, "--ctx must be at least 2"},
		{[]string{"--model-path", noTok, "--data", data}, "tokenizer"},
		{[]string{"--model-path", dir, "--data", data, "--kt-weight-path", dir}, "needs --kt-method"},
		{[]string{"--model-path", dir, "--data", data, "--device", "tpu"}, "--device"},
	} {
		_, _, err := runKT(t, append([]string{"eval", "--threads", "2"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}
