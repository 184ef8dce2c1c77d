package hybrid

import (
	"fmt"
	"strings"
	"time"
)

// handoffTiming sums the hand-off times of piecewise decode steps, per
// model layer, when settings.HybridTiming asks for them (SGLang-KT's
// SGLANG_KT_HYBRID_TIMING): per MoE layer, how long the host waited for
// the GPU piece before it (its kernels up to the layer's copies, the
// piece's launch included) and how long the layer's CPU experts took, and
// how many of each layer's picks its prefetched prediction (made during
// the MoE layer before it, or at the step's start for the first) named.
// Off by default: it reads the clock three times per layer.
type handoffTiming struct {
	first      int // the first MoE layer: a step starts there
	steps      int
	wait, work []time.Duration // per model layer
	// launch sums the host time between one hand-off's end and the next
	// one's start in a step: next to nothing with the ahead hand-off (the
	// launch then runs while the CPU experts do, and the wait for the next
	// piece includes the GPU's reading of the counter), the next piece's
	// launch (cuGraphLaunch) with the plain one (expert deferral)
	launch  time.Duration
	prevEnd time.Time // the last hand-off's end in this step
	// hits and picks count, per model layer, the prefetched predictions'
	// experts that the layer's tokens then picked, and all their picks
	// (hand-offs with a prediction only)
	hits, picks []int
}

func newHandoffTiming(layers, first int) *handoffTiming {
	return &handoffTiming{first: first, wait: make([]time.Duration, layers), work: make([]time.Duration, layers),
		hits: make([]int, layers), picks: make([]int, layers)}
}

// predicted counts layer l's picks (k per token) that the prefetched
// prediction pred (the same layout) named for the same token.
func (h *handoffTiming) predicted(l, k int, pred, picks []int32) {
	hits, all := h.hits, h.picks
	for t := 0; t+k <= len(picks) && t+k <= len(pred); t += k {
		for _, id := range picks[t : t+k] {
			if id < 0 {
				continue
			}
			all[l]++
			for _, q := range pred[t : t+k] {
				if q == id {
					hits[l]++
					break
				}
			}
		}
	}
}

// add records layer l's hand-off: entered at t0, the GPU piece done at t1,
// the CPU experts done at t2.
func (h *handoffTiming) add(l int, t0, t1, t2 time.Time) {
	if l == h.first {
		h.steps++
	} else if !h.prevEnd.IsZero() {
		h.launch += t0.Sub(h.prevEnd)
	}
	h.wait[l] += t1.Sub(t0)
	h.work[l] += t2.Sub(t1)
	h.prevEnd = t2
}

// String reports the mean per step: the GPU wait and the CPU experts' time
// in total and per MoE layer (µs).
func (h *handoffTiming) String() string {
	if h == nil || h.steps == 0 {
		return ""
	}
	var wait, work time.Duration
	var pw, pc []string
	per := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d.Microseconds())/float64(h.steps)) }
	for l := range h.wait {
		if h.wait[l] == 0 && h.work[l] == 0 {
			continue
		}
		wait += h.wait[l]
		work += h.work[l]
		pw, pc = append(pw, per(h.wait[l])), append(pc, per(h.work[l]))
	}
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(h.steps) }
	s := fmt.Sprintf("hand-off timing over %d piecewise steps: per step %.3f ms waiting for the GPU pieces (µs per MoE layer %s), %.3f ms in the CPU experts (%s), %.3f ms launching the pieces between hand-offs",
		h.steps, ms(wait), strings.Join(pw, " "), ms(work), strings.Join(pc, " "), ms(h.launch))
	if pct, per := predShare(h.hits, h.picks); per != "" {
		s += fmt.Sprintf("\nprediction: %.0f%% of the picks of hand-offs with a prefetch were predicted (%% per MoE layer %s)", pct, per)
	}
	return s
}

// predShare is the share of picks hit in all (%) and per layer with picks.
func predShare(hits, picks []int) (float64, string) {
	var h, n int
	var per []string
	for l := range picks {
		if picks[l] > 0 {
			h, n = h+hits[l], n+picks[l]
			per = append(per, fmt.Sprintf("%.0f", 100*float64(hits[l])/float64(picks[l])))
		}
	}
	if n == 0 {
		return 0, ""
	}
	return 100 * float64(h) / float64(n), strings.Join(per, " ")
}
