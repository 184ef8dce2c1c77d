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
	t0 := time.Unix(0, 0)
	for step := 0; step < 2; step++ {
		for l := 1; l < 4; l++ {
			h.add(l, t0, t0.Add(time.Duration(l)*100*time.Microsecond), t0.Add(time.Duration(l)*100*time.Microsecond+200*time.Microsecond))
		}
	}
	want := "hand-off timing over 2 piecewise steps: per step 0.600 ms waiting for the GPU pieces (µs per MoE layer 100 200 300), 0.600 ms in the CPU experts (200 200 200)"
	if s := h.String(); s != want {
		t.Errorf("got  %q\nwant %q", s, want)
	}
}
