package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerateJSONMatchesReference drives `kt generate --json` on a
// fixture and compares ids and logprobs with transformers' reference.
func TestGenerateJSONMatchesReference(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "models", "qwen3moe-c")
	data, err := os.ReadFile(filepath.Join(dir, "reference.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Cases []struct {
			PromptIDs      []int32   `json:"prompt_ids"`
			GreedyIDs      []int32   `json:"greedy_ids"`
			GreedyLogprobs []float64 `json:"greedy_logprobs"`
			Top2Margin     []float64 `json:"top2_margin"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	c := ref.Cases[1]
	ids := make([]string, len(c.PromptIDs))
	for i, id := range c.PromptIDs {
		ids[i] = fmt.Sprint(id)
	}
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"generate", "--model-path", dir, "--input-ids", strings.Join(ids, ","),
		"--max-new-tokens", "24", "--ignore-eos", "--json", "--top-logprobs", "4", "--chunked-prefill-size", "16", "--threads", "2"})
	if err := root.Execute(); err != nil {
		t.Fatal(err, errOut.String())
	}
	var got struct {
		OutputIDs []int32 `json:"output_ids"`
		Output    []struct {
			Logprob float64 `json:"logprob"`
			Top     []struct {
				ID int32 `json:"id"`
			} `json:"top_logprobs"`
		} `json:"output"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err, out.String())
	}
	if len(got.OutputIDs) != 24 {
		t.Fatalf("%d output ids", len(got.OutputIDs))
	}
	for s, id := range got.OutputIDs {
		if id != c.GreedyIDs[s] {
			t.Fatalf("step %d: %d, reference %d", s, id, c.GreedyIDs[s])
		}
		if d := math.Abs(got.Output[s].Logprob - c.GreedyLogprobs[s]); d > 1e-3 || len(got.Output[s].Top) != 4 {
			t.Fatalf("step %d: logprob off by %g, %d alternatives", s, d, len(got.Output[s].Top))
		}
		if c.Top2Margin[s] <= 1e-3 {
			break
		}
	}
}

func TestGenerateFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"generate"},
		{"generate", "--model-path", "x"},
		{"generate", "--model-path", "x", "--input-ids", "1", "--prompt", "a"},
		{"generate", "--model-path", "x", "--input-ids", "1,-2"},
		{"generate", "--model-path", t.TempDir(), "--input-ids", "1"},
	} {
		root := newRootCmd()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(args)
		if err := root.Execute(); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
