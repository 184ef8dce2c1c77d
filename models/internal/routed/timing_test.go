package routed

import (
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
