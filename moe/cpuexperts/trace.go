//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"strings"
)

// TraceHeader is the column header of TaskTrace.Row: microseconds per task
// from the job's publication (sub>pick and pick>pub come before it;
// >compl, >ret and >nextsub after all done).
const TraceHeader = "decode tasks, us per task from the job's publication (sub->pick, pick->pub before it; done->compl, ->ret, ->next sub after):\n" +
	"method       tokens sub>pick pick>pub    seen  seenmx  gu-end  endmin  endavg  endmax alldone  >compl    >ret >nextsub     items gu-work dn-work"

// Row formats t as one line under TraceHeader, labelled with method and
// tokens, followed by the sleeps and each worker's mean start and done
// times (µs) on two more lines.
func (t TaskTrace) Row(method string, tokens int) string {
	us := func(s float64) float64 { return s * 1e6 }
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %6d %8.1f %8.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %8.1f %4.1f-%-4.1f %7.1f %7.1f\n",
		method, tokens, us(t.SubmitPick), us(t.PickPublish), us(t.SeenMean), us(t.SeenMax), us(t.GateUpEnd),
		us(t.EndMin), us(t.EndMean), us(t.EndMax), us(t.AllDone), us(t.DoneCompl), us(t.ComplReturn), us(t.ReturnSub),
		t.ItemsMin, t.ItemsMax,
		us(t.GateUpWork), us(t.DownWork))
	fmt.Fprintf(&b, "  sleeps per task: engine %.2f, sync %.2f; per-thread start (us):", t.Sleeps, t.SyncSleeps)
	for _, v := range t.WorkerSeen {
		fmt.Fprintf(&b, " %.0f", us(v))
	}
	b.WriteString("\n  per-thread done (us):")
	for _, v := range t.WorkerEnd {
		fmt.Fprintf(&b, " %.0f", us(v))
	}
	return b.String()
}
