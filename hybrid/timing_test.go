package hybrid

import (
	"math"
	"math/rand/v2"
	"slices"
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
	h.predicted(1, 2, []int32{5, 7, 1, 2}, []int32{7, 5, 2, 9}, false)
	// layer 2: one token, no pick predicted; a padding row's -1 picks are not counted
	h.predicted(2, 2, []int32{3, 4, 3, 4}, []int32{1, 2, -1, -1}, false)
	s := h.String()
	want := "prediction: 50% of the picks of hand-offs with a prefetch were predicted (% per MoE layer 75 0)"
	if !strings.HasSuffix(s, "\n"+want) {
		t.Errorf("got %q\nwant it to end with %q", s, want)
	}
	// the second prediction (PredictEnv=refine) of layer 2: one of its two picks
	h.predicted(2, 2, []int32{1, 4}, []int32{1, 2}, true)
	want += "; predicted again at the layer's start (KT_HYBRID_PREDICT=refine): 50% (50)"
	if s := h.String(); !strings.HasSuffix(s, "\n"+want) {
		t.Errorf("got %q\nwant it to end with %q", s, want)
	}
}

// TestRefined checks the order of a refined prefetch: the experts both
// predictions name (in the later one's order), the later one's others,
// the earlier one's others.
func TestRefined(t *testing.T) {
	for _, c := range []struct{ later, earlier, want []int32 }{
		{[]int32{1, 2, 3, 4}, []int32{4, 9, 2, 8}, []int32{2, 4, 1, 3, 9, 8}},
		{[]int32{1, 2}, []int32{1, 2}, []int32{1, 2}},
		{[]int32{1, 2}, nil, []int32{1, 2}},
		{nil, []int32{5}, []int32{5}},
	} {
		if got := refined(nil, c.later, c.earlier); !slices.Equal(got, c.want) {
			t.Errorf("refined(%v, %v) = %v, want %v", c.later, c.earlier, got, c.want)
		}
	}
}

// TestTopK checks the host's pick of a prediction's experts against a
// plain selection (largest first, ties to the lower index, NaN never):
// random logits with many ties, k from 1 to past the non-NaN count.
func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		e := 1 + rng.IntN(300)
		logits := make([]float32, e)
		for i := range logits {
			logits[i] = float32(rng.IntN(20)) // ties
			if rng.IntN(50) == 0 {
				logits[i] = float32(math.NaN())
			}
		}
		k := 1 + rng.IntN(min(e, 70)+2)
		got := make([]int32, k)
		topK(got, logits)
		want := make([]int32, 0, k)
		for len(want) < k {
			best := -1
			for i, v := range logits {
				if v == v && !slices.Contains(want, int32(i)) && (best < 0 || v > logits[best]) {
					best = i
				}
			}
			want = append(want, int32(best))
			if best < 0 {
				for len(want) < k {
					want = append(want, -1)
				}
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: %d logits, k %d: got %v, want %v", trial, e, k, got, want)
		}
	}
}
