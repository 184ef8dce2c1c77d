package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/ktserve/kt/internal/fixtures"
)

// generateRef is one `kt generate --json` run checked against a fixture's
// transformers reference: the prompt of case Case (-1: the last), prefilled
// in chunks of Chunk tokens, Steps greedy tokens, and Top alternatives per
// step when Top > 0.
type generateRef struct {
	Fixture string
	Case    int
	Steps   int
	Chunk   int
	Top     int
	Args    []string // more flags
}

// checkGenerate runs each row through `kt generate --json` and compares the
// ids and logprobs with the reference until the reference's top-2 margin
// is too small for the greedy choice to be stable.
func checkGenerate(t *testing.T, rows []generateRef) {
	for _, r := range rows {
		t.Run(r.Fixture, func(t *testing.T) {
			cases := fixtures.Load(t, r.Fixture)
			i := r.Case
			if i < 0 {
				i = len(cases) + i
			}
			c := cases[i]
			ids := make([]string, len(c.PromptIDs))
			for i, id := range c.PromptIDs {
				ids[i] = fmt.Sprint(id)
			}
			args := []string{"generate", "--model-path", fixtures.Dir(r.Fixture), "--input-ids", strings.Join(ids, ","),
				"--max-new-tokens", strconv.Itoa(r.Steps), "--ignore-eos", "--json"}
			if r.Top > 0 {
				args = append(args, "--top-logprobs", strconv.Itoa(r.Top))
			}
			args = append(args, "--chunked-prefill-size", strconv.Itoa(r.Chunk), "--threads", "2")
			args = append(args, r.Args...)
			stdout, stderr, err := runKT(t, args...)
			if err != nil {
				t.Fatalf("%s: %v\n%s", r.Fixture, err, stderr)
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
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatal(err, stdout)
			}
			if len(got.OutputIDs) != r.Steps {
				t.Fatalf("%s: %d output ids", r.Fixture, len(got.OutputIDs))
			}
			for s, id := range got.OutputIDs {
				if id != c.GreedyIDs[s] {
					t.Fatalf("%s: step %d: %d, reference %d", r.Fixture, s, id, c.GreedyIDs[s])
				}
				if d := math.Abs(got.Output[s].Logprob - c.GreedyLogprobs[s]); d > 1e-3 {
					t.Fatalf("%s: step %d: logprob off by %g", r.Fixture, s, d)
				}
				if r.Top > 0 && len(got.Output[s].Top) != r.Top {
					t.Fatalf("%s: step %d: %d alternatives", r.Fixture, s, len(got.Output[s].Top))
				}
				if c.Top2Margin[s] <= 1e-3 {
					break
				}
			}
		})
	}
}

// TestGenerateJSONMatchesReference drives `kt generate --json` on a
// fixture and compares ids, logprobs and the number of alternatives with
// transformers' reference.
func TestGenerateJSONMatchesReference(t *testing.T) {
	checkGenerate(t, []generateRef{{Fixture: "qwen3moe-c", Case: 1, Steps: 24, Chunk: 16, Top: 4}})
}

// TestGenerateQwen3NextAndQwen35 drives `kt generate` on a Qwen3-Next and
// the two Qwen3.5 MoE fixtures, prefilling the 200-token prompt in odd
// chunks, and checks the greedy continuation against transformers.
func TestGenerateQwen3NextAndQwen35(t *testing.T) {
	checkGenerate(t, []generateRef{
		{Fixture: "qwen3next-b", Case: -1, Steps: 16, Chunk: 37},
		{Fixture: "qwen35moe-a", Case: -1, Steps: 16, Chunk: 37},
		{Fixture: "qwen35moe-b", Case: -1, Steps: 16, Chunk: 37},
	})
}

// TestGenerateTensorParallel drives `kt generate` over 2 CPU ranks (and
// 4 through the alias) and checks the greedy continuation against
// transformers.
func TestGenerateTensorParallel(t *testing.T) {
	checkGenerate(t, []generateRef{
		{Fixture: "qwen3moe-c", Case: 1, Steps: 12, Chunk: 16, Args: []string{"--device", "cpu", "--tensor-parallel-size", "2"}},
		{Fixture: "qwen35moe-b", Case: -1, Steps: 8, Chunk: 37, Args: []string{"--device", "cpu", "--tp-size", "4"}},
	})
}

func TestGenerateFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"generate"},
		{"generate", "--model-path", "x"},
		{"generate", "--model-path", "x", "--input-ids", "1", "--prompt", "a"},
		{"generate", "--model-path", "x", "--input-ids", "1,-2"},
		{"generate", "--model-path", t.TempDir(), "--input-ids", "1"},
		{"generate", "--model-path", fixtures.Dir("qwen3moe-a"), "--input-ids", "1", "--tp-size", "0"},
		{"generate", "--model-path", fixtures.Dir("qwen3moe-a"), "--input-ids", "1", "--device", "cpu", "--tp-size", "3"},
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
