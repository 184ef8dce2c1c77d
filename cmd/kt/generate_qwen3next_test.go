package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerateQwen3NextAndQwen35 drives `kt generate` on a Qwen3-Next and
// the two Qwen3.5 MoE fixtures, prefilling the 200-token prompt in odd
// chunks, and checks the greedy continuation against transformers.
func TestGenerateQwen3NextAndQwen35(t *testing.T) {
	for _, fx := range []string{"qwen3next-b", "qwen35moe-a", "qwen35moe-b"} {
		dir := filepath.Join("..", "..", "testdata", "models", fx)
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
		c := ref.Cases[len(ref.Cases)-1]
		ids := make([]string, len(c.PromptIDs))
		for i, id := range c.PromptIDs {
			ids[i] = fmt.Sprint(id)
		}
		stdout, stderr, err := runKT(t, "generate", "--model-path", dir, "--input-ids", strings.Join(ids, ","),
			"--max-new-tokens", "16", "--ignore-eos", "--json", "--chunked-prefill-size", "37", "--threads", "2")
		if err != nil {
			t.Fatalf("%s: %v\n%s", fx, err, stderr)
		}
		var got struct {
			OutputIDs []int32 `json:"output_ids"`
			Output    []struct {
				Logprob float64 `json:"logprob"`
			} `json:"output"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatal(err, stdout)
		}
		if len(got.OutputIDs) != 16 {
			t.Fatalf("%s: %d output ids", fx, len(got.OutputIDs))
		}
		for s, id := range got.OutputIDs {
			if id != c.GreedyIDs[s] {
				t.Fatalf("%s: step %d: %d, reference %d", fx, s, id, c.GreedyIDs[s])
			}
			if d := math.Abs(got.Output[s].Logprob - c.GreedyLogprobs[s]); d > 1e-3 {
				t.Fatalf("%s: step %d: logprob off by %g", fx, s, d)
			}
			if c.Top2Margin[s] <= 1e-3 {
				break
			}
		}
	}
}
