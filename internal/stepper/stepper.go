// Package stepper drives several model runners through the same steps in
// tests (decode graphs against op-by-op runs, hybrid against all-GPU, ...):
// it keeps each sequence slot's position and next greedy token, builds a
// step from the slots (a prompt chunk, or each slot's next token), runs it
// on every runner and hands back copies of the logits rows.
package stepper

import (
	"testing"

	"github.com/ktserve/kt/model"
)

// Steps is the shared state of the runners' sequences.
type Steps struct {
	Runners []model.Runner
	Pos     map[int]int   // tokens each slot holds
	Next    map[int]int32 // each slot's next token (greedy from the reference rows)
}

// New starts empty sequences on runners.
func New(runners ...model.Runner) *Steps {
	return &Steps{Runners: runners, Pos: map[int]int{}, Next: map[int]int32{}}
}

// Run builds one step from slots — prompt[s] where given, else slot s's
// next token — reserves and runs it on every runner and returns the step
// and the logits rows, rows[runner][i] for the i-th logits row of the step
// (chunk order), copied.
func (s *Steps) Run(t testing.TB, what string, slots []int, prompt map[int][]int32) (model.Batch, [][][]float32) {
	t.Helper()
	var b model.Batch
	for _, sl := range slots {
		toks := prompt[sl]
		if toks == nil {
			toks = []int32{s.Next[sl]}
		}
		b.Chunks = append(b.Chunks, model.Chunk{Slot: sl, Pos: s.Pos[sl], Tokens: toks})
	}
	rows := make([][][]float32, len(s.Runners))
	for i, r := range s.Runners {
		for _, c := range b.Chunks {
			if err := r.Reserve(c.Slot, len(c.Tokens)); err != nil {
				t.Fatalf("%s: reserve: %v", what, err)
			}
		}
		var out model.Logits
		if err := r.Forward(&b, &out); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for _, rr := range out.Rows {
			for _, row := range rr {
				rows[i] = append(rows[i], append([]float32(nil), row...))
			}
		}
	}
	return b, rows
}

// Advance moves each chunk's slot past its tokens and takes its next token
// as the argmax (first of equal maxima) of ref, the step's rows of the
// reference runner.
func (s *Steps) Advance(b model.Batch, ref [][]float32) {
	for i, c := range b.Chunks {
		s.Pos[c.Slot] += len(c.Tokens)
		best := 0
		for j, v := range ref[i] {
			if v > ref[i][best] {
				best = j
			}
		}
		s.Next[c.Slot] = int32(best)
	}
}

// Free frees slot on every runner and restarts its sequence.
func (s *Steps) Free(slot int) {
	for _, r := range s.Runners {
		r.Free(slot)
	}
	s.Pos[slot] = 0
}
