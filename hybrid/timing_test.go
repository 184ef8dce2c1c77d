package hybrid

import (
	"strings"
	"testing"
	"time"
)

func TestHandoffTiming(t *testing.T) {
	var off *handoffTiming
	if s := off.String(); s != "" {
		t.Errorf("off: %q", s)
	}
	h := newHandoffTiming(4, 1) // layer 0 dense, MoE layers 1..3
	if s := h.String(); s != "" {
		t.Errorf("no step yet: %q", s)
	}
	now := time.Unix(0, 0)
	for step := 0; step < 2; step++ {
		for l := 1; l < 4; l++ {
			now = now.Add(10 * time.Microsecond) // the launch before this hand-off
			w := time.Duration(l) * 100 * time.Microsecond
			h.add(l, now, now.Add(w), now.Add(w+200*time.Microsecond))
			now = now.Add(w + 200*time.Microsecond)
		}
		now = now.Add(time.Millisecond) // the last piece, the logits, the next step's start
	}
	want := "hand-off timing over 2 piecewise steps: per step 0.600 ms waiting for the GPU pieces (µs per MoE layer 100 200 300), 0.600 ms in the CPU experts (200 200 200), 0.020 ms launching the pieces between hand-offs"
	if s := h.String(); s != want {
		t.Errorf("got  %q\nwant %q", s, want)
	}
}

// TestHandoffPrediction checks the prediction score: per token, the picks
// the prediction named (in any order), ids < 0 (padding rows) left out,
// per layer and in all.
func TestHandoffPrediction(t *testing.T) {
	h := newHandoffTiming(3, 1)
	now := time.Unix(0, 0)
	h.add(1, now, now.Add(time.Microsecond), now.Add(2*time.Microsecond))
	h.add(2, now, now.Add(time.Microsecond), now.Add(2*time.Microsecond))
	// layer 1, two tokens of k = 2: token 0 both picks predicted (swapped), token 1 one
	h.predicted(1, 2, []int32{5, 7, 1, 2}, []int32{7, 5, 2, 9})
	// layer 2: one token, no pick predicted; a padding row's -1 picks are not counted
	h.predicted(2, 2, []int32{3, 4, 3, 4}, []int32{1, 2, -1, -1})
	s := h.String()
	want := "prediction: 50% of the picks of hand-offs with a prefetch were predicted (% per MoE layer 75 0)"
	if !strings.HasSuffix(s, "\n"+want) {
		t.Errorf("got %q\nwant it to end with %q", s, want)
	}
}
