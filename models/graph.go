package models

import (
	"fmt"

	"github.com/ktserve/kt/model"
)

// GraphStats counts what a runner's decode graph path did: decode steps
// captured into a graph (one per batch size bucket, again after a buffer
// they use moved) and replayed.
type GraphStats struct {
	Captures, Replays int
	// Off says why decode steps are not captured ("" when they are).
	Off string
	// Failed is the last capture error (that bucket then ran op by op).
	Failed string
}

// String is a one-line summary for logs.
func (s GraphStats) String() string {
	if s.Off != "" {
		return "off (" + s.Off + ")"
	}
	out := fmt.Sprintf("%d captured, %d replayed", s.Captures, s.Replays)
	if s.Failed != "" {
		out += "; capture failed: " + s.Failed
	}
	return out
}

// GraphStatsOf returns r's decode graph statistics; ok is false for a
// runner without a graph path.
func GraphStatsOf(r model.Runner) (s GraphStats, ok bool) {
	if o, owned := r.(*ownedRunner); owned {
		r = o.Runner
	}
	if p, has := r.(interface{ GraphStats() GraphStats }); has {
		return p.GraphStats(), true
	}
	return GraphStats{}, false
}
