package arch

import (
	"fmt"
	"time"

	"github.com/ktserve/kt/model"
)

// GraphStats counts what a runner's decode graph path did: decode steps
// captured into a graph (one per batch size bucket, again after a buffer
// they use moved) and replayed.
type GraphStats struct {
	Captures, Replays int
	// Segments is the number of graphs a step captured last was
	// recorded as: more than 1 for piecewise graphs (the hybrid step: one
	// per stretch between its CPU experts' hand-offs), 1 for one graph.
	Segments int
	// Off says why decode steps are not captured ("" when they are).
	Off string
	// Failed is the last capture error (that bucket then ran op by op).
	Failed string
	// DecodeSteps counts the decode steps (every chunk one token),
	// whichever path ran them, and DecodeForward their time in
	// Forward, from the batch to the logits in host memory: what is left
	// of a decode step's time is the caller's (sampling, scheduling).
	DecodeSteps   int
	DecodeForward time.Duration
}

// String is a one-line summary for logs.
func (s GraphStats) String() string {
	out := fmt.Sprintf("%d captured, %d replayed", s.Captures, s.Replays)
	if s.Segments > 1 {
		out += fmt.Sprintf(" (piecewise: %d graphs per step)", s.Segments)
	}
	if s.Off != "" {
		out = "off (" + s.Off + ")"
	}
	if s.DecodeSteps > 0 {
		out += fmt.Sprintf("; %d decode steps, %.3f ms each in Forward", s.DecodeSteps, s.DecodeForward.Seconds()*1e3/float64(s.DecodeSteps))
	}
	if s.Failed != "" {
		out += "; capture failed: " + s.Failed
	}
	return out
}

// GraphStatsOf returns r's decode graph statistics; ok is false for a
// runner without a graph path.
func GraphStatsOf(r model.Runner) (s GraphStats, ok bool) {
	if p, has := model.As[interface{ GraphStats() GraphStats }](r); has {
		return p.GraphStats(), true
	}
	return GraphStats{}, false
}
