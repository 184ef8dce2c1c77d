// Package doctor runs the checks behind `kt doctor`: each check inspects
// one aspect of the machine or a model directory and returns results that
// pass, warn or fail, each with a concrete hint. Checks are plain functions
// collected by Checks, so new areas (GPU and CUDA libraries live in gpu.go)
// add a file without touching the others.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/ktserve/kt/sysinfo"
)

// Status is a result's verdict.
type Status int

// Verdicts, in increasing severity.
const (
	Pass Status = iota
	Warn
	Fail
)

func (s Status) String() string {
	switch s {
	case Pass:
		return "pass"
	case Warn:
		return "warn"
	case Fail:
		return "fail"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// MarshalText renders s as "pass", "warn" or "fail".
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Result is one line of the report.
type Result struct {
	Section string `json:"section"` // "cpu", "memory", "gpu", "model", "perf", "settings"
	Name    string `json:"name"`    // stable identifier, e.g. "cpu.isa"
	Status  Status `json:"status"`
	Detail  string `json:"detail"`         // what was found
	Hint    string `json:"hint,omitempty"` // what to do about it
	// Data holds the machine-readable facts behind Detail (for --json).
	Data map[string]any `json:"data,omitempty"`
}

// Env is what checks inspect. Sys is read once and shared.
type Env struct {
	Sys *sysinfo.Info
	// ModelPath, when set, adds the model-directory checks.
	ModelPath string
	// TPSize is --tensor-parallel-size: with ModelPath, whether the model
	// splits over that many ranks; on the GPU, whether there are that many
	// GPUs, NCCL and peer access between them (0 or 1: one rank).
	TPSize int
	// AMXGranted is set by the AMX check (which requests the grant) and
	// read by later checks.
	AMXGranted bool
	// Measure adds the measurements (perf.*): memory read bandwidth, the
	// AMX tile rate and, with ModelPath, the decode bound they give.
	Measure bool

	readGBps float64 // set by perf.read for perf.decode

	model *modelState // loaded on first use by the model checks
}

// Check is one named check.
type Check struct {
	Name string
	Run  func(*Env) []Result
}

// Checks returns every check in report order.
func Checks() []Check {
	var cs []Check
	cs = append(cs, cpuChecks()...)
	cs = append(cs, memoryChecks()...)
	cs = append(cs, gpuChecks()...)
	cs = append(cs, modelChecks()...)
	cs = append(cs, perfChecks()...)
	cs = append(cs, settingsChecks()...)
	return cs
}

// Run runs checks against env and returns their results in order. A check
// that panics becomes a failed result rather than crashing kt doctor.
func Run(env *Env, checks []Check) []Result {
	var out []Result
	for _, c := range checks {
		out = append(out, runOne(env, c)...)
	}
	return out
}

func runOne(env *Env, c Check) (res []Result) {
	defer func() {
		if r := recover(); r != nil {
			res = []Result{{Section: "internal", Name: c.Name, Status: Fail, Detail: fmt.Sprintf("check crashed: %v", r), Hint: "this is a kt bug; please report it with the output of kt doctor --json"}}
		}
	}()
	return c.Run(env)
}

// Worst returns the most severe status among results (Pass when empty).
func Worst(results []Result) Status {
	w := Pass
	for _, r := range results {
		w = max(w, r.Status)
	}
	return w
}

// WriteText renders results as lines aligned within each section, hints
// indented below.
func WriteText(w io.Writer, results []Result) error {
	var b strings.Builder
	section, width := "", 0
	for i, r := range results {
		if r.Section != section || i == 0 {
			if i > 0 {
				b.WriteByte('\n')
			}
			section = r.Section
			fmt.Fprintf(&b, "%s\n", strings.ToUpper(section))
			width = 0
			for _, o := range results[i:] {
				if o.Section != section {
					break
				}
				width = max(width, len(o.Name))
			}
		}
		fmt.Fprintf(&b, "  [%s] %-*s  %s\n", strings.ToUpper(r.Status.String()), width, r.Name, r.Detail)
		if r.Hint != "" {
			fmt.Fprintf(&b, "  %*s  hint: %s\n", width+7, "", r.Hint)
		}
	}
	counts := map[Status]int{}
	for _, r := range results {
		counts[r.Status]++
	}
	fmt.Fprintf(&b, "\n%d passed, %d warnings, %d failed\n", counts[Pass], counts[Warn], counts[Fail])
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON renders results as {"results": [...], "status": worst}.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if results == nil {
		results = []Result{}
	}
	return enc.Encode(struct {
		Status  Status   `json:"status"`
		Results []Result `json:"results"`
	}{Worst(results), results})
}

// GiB formats a byte count in GiB with one decimal.
func GiB(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }
