//go:build linux && amd64 && cgo

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ktserve/kt/moe/cpuexperts"
)

// fakePython writes an executable that stands in for the interpreter of
// torch_moe.py --serve: it ignores its arguments and answers each token
// count read from stdin with the lines replies gives it (none: it prints to
// stderr and exits with code 1).
func fakePython(t *testing.T, replies map[int]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\n"
	if replies == nil {
		script += "echo 'torch says why' >&2\nexit 1\n"
	} else {
		script += "while read n; do case $n in\n"
		for n, out := range replies {
			script += fmt.Sprintf("%d) cat <<'EOF'\n%s\nEOF\n;;\n", n, out)
		}
		script += "esac; done\n"
	}
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTorchServerParsesBaseline: each request's JSON line gives the fastest
// form with every form's figure, repeated requests are answered again, junk
// lines are skipped, and a failing interpreter's stderr reaches the error.
func TestTorchServerParsesBaseline(t *testing.T) {
	shape := cpuexperts.BenchShape{Name: "x", Experts: 8, Hidden: 128, Intermediate: 64, TopK: 2}
	replies := map[int]string{
		1: `{"tokens": 1, "seconds": 0.001, "tflops": 0.02, "variant": "fused", "threads": 16, "all": {"index@15": 0.015, "fused@16": 0.02}}`,
		4096: `warning: not json
{"tokens": 4096, "seconds": 0.2, "tflops": 1.5, "variant": "index", "threads": 15, "all": {"index@15": 1.5, "fused@15": 1.4}}`,
	}
	ts, err := startTorch(fakePython(t, replies), shape, 15)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r, err := ts.measure(1)
		if err != nil {
			t.Fatal(err)
		}
		if r.TFLOPS != 0.02 || r.Variant != "fused" || r.Threads != 16 || r.All["index@15"] != 0.015 {
			t.Errorf("1 token: %+v", r)
		}
		if r, err = ts.measure(4096); err != nil || r.TFLOPS != 1.5 || r.Variant != "index" {
			t.Errorf("4096 tokens: %+v, %v", r, err)
		}
		if got, want := r.allText(), "fused@15 1.400, index@15 1.500"; got != want {
			t.Errorf("allText %q, want %q", got, want)
		}
	}
	ts.close()

	ts, err = startTorch(fakePython(t, nil), shape, 15)
	if err != nil {
		t.Fatal(err)
	}
	defer ts.close()
	if _, err := ts.measure(1); err == nil || !strings.Contains(err.Error(), "torch says why") {
		t.Errorf("failing interpreter: %v", err)
	}
}

// TestMoERecordOfRounds: a record holds the round of median time, the
// baseline's median and the median and range of the rounds' own ratios.
func TestMoERecordOfRounds(t *testing.T) {
	shape := cpuexperts.BenchShape{Name: "x"}
	pt := func(sec, torch float64) moePoint {
		return moePoint{r: cpuexperts.BenchResult{Method: cpuexperts.AMXBF16, Tokens: 4096, Seconds: sec, FLOPs: 1e12}, near: 1e11, torch: torch}
	}
	// TFLOPS 1/sec: rounds 20, 25, 50 TF over baselines 5, 10, 10: ratios 4, 2.5, 5
	rec := moeRecordOf(shape, []moePoint{pt(0.05, 5), pt(0.04, 10), pt(0.02, 10)}, 3)
	if rec.MsPerLayer != 40 || rec.TorchTF != 10 || rec.XTorch != 4 || rec.XTorchMin != 2.5 || rec.XTorchMax != 5 || rec.Rounds != 3 {
		t.Errorf("record %+v", rec)
	}
	if want := []float64{50, 40, 20}; !slices.Equal(rec.RoundMs, want) {
		t.Errorf("round ms %v, want %v", rec.RoundMs, want)
	}
	if one := moeRecordOf(shape, []moePoint{pt(0.05, 0)}, 3); one.TorchTF != 0 || one.XTorch != 0 || one.MsPerLayer != 50 {
		t.Errorf("no baseline: %+v", one)
	}
}

// TestSetXBF16 checks the same-round ratios to AMXBF16: round by round,
// median and range; none for AMXBF16 itself, for another token count or
// for a different number of rounds.
func TestSetXBF16(t *testing.T) {
	recs := []moeRecord{
		{Method: "AMXBF16", Tokens: 4096, RoundMs: []float64{40, 30, 50}},
		{Method: "AMXINT8", Tokens: 4096, RoundMs: []float64{20, 25, 20}}, // 2, 1.2, 2.5
		{Method: "AMXINT4", Tokens: 512, RoundMs: []float64{1, 1, 1}},
		{Method: "BF16", Tokens: 4096, RoundMs: []float64{40, 40}},
	}
	setXBF16(recs)
	if r := recs[1]; r.XBF16 != 2 || r.XBF16Min != 1.2 || r.XBF16Max != 2.5 {
		t.Errorf("AMXINT8: x %v (%v-%v), want 2 (1.2-2.5)", r.XBF16, r.XBF16Min, r.XBF16Max)
	}
	for _, i := range []int{0, 2, 3} {
		if recs[i].XBF16 != 0 {
			t.Errorf("%s at %d tokens: x %v, want none", recs[i].Method, recs[i].Tokens, recs[i].XBF16)
		}
	}
}

// TestBenchShapeRounds runs the moe bench on a tiny shape against a stand-in
// baseline: with two rounds every row holds two rounds, each against its
// own baseline run, and the printed table carries the range; with one round
// every row holds one.
func TestBenchShapeRounds(t *testing.T) {
	shape := cpuexperts.BenchShape{Name: "tiny", Experts: 8, Hidden: 128, Intermediate: 64, TopK: 2}
	replies := map[int]string{
		1:  `{"tokens": 1, "seconds": 1, "tflops": 0.001, "variant": "fused", "threads": 2, "all": {"fused@2": 0.001}}`,
		40: `{"tokens": 40, "seconds": 1, "tflops": 0.002, "variant": "index", "threads": 2, "all": {"index@2": 0.002}}`,
	}
	py := fakePython(t, replies)
	for _, rounds := range []int{1, 2} {
		e, err := cpuexperts.NewEngine(cpuexperts.Config{Threads: 2, MaxTokens: 40, TopK: shape.TopK, Experts: shape.Experts,
			Hidden: shape.Hidden, Intermediate: shape.Intermediate})
		if err != nil {
			t.Fatal(err)
		}
		probe, err := cpuexperts.NewReadProbe(1<<20, 1)
		if err != nil {
			t.Fatal(err)
		}
		o := moeBenchOpts{compareTorch: true, python: py, rounds: rounds, minTime: time.Millisecond, bwBytes: 1 << 20}
		var out strings.Builder
		recs, err := benchShape(e, probe, shape, []cpuexperts.Method{cpuexperts.AMXBF16, cpuexperts.AMXINT8}, []int{1, 40}, 1<<20, o, &out)
		probe.Close()
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 4 {
			t.Fatalf("%d rounds: %d records, want 4", rounds, len(recs))
		}
		for _, r := range recs {
			want := map[int]float64{1: 0.001, 40: 0.002}[r.Tokens]
			if r.Rounds != rounds || len(r.RoundMs) != rounds || r.TorchTF != want || r.XTorch <= 0 || r.XTorchMin > r.XTorch || r.XTorch > r.XTorchMax {
				t.Errorf("%d rounds: %s at %d tokens: %+v", rounds, r.Method, r.Tokens, r)
			}
			// the same-round ratio to AMXBF16: AMXINT8's, with more than one round
			if hasX := r.XBF16 > 0; hasX != (rounds > 1 && r.Method == string(cpuexperts.AMXINT8)) {
				t.Errorf("%d rounds: %s at %d tokens: x_amxbf16 %v", rounds, r.Method, r.Tokens, r.XBF16)
			}
		}
		if got := strings.Contains(out.String(), "rounds: each row is the round of median time"); got != (rounds > 1) {
			t.Errorf("%d rounds: rounds line printed %v:\n%s", rounds, got, out.String())
		}
		if n := strings.Count(out.String(), "AMXINT8 ÷ AMXBF16 at "); n != map[bool]int{false: 0, true: 2}[rounds > 1] {
			t.Errorf("%d rounds: %d lines of AMXINT8 ÷ AMXBF16:\n%s", rounds, n, out.String())
		}
		// one baseline run per round and token count
		if n := strings.Count(out.String(), "; median of 2 rounds:"); rounds == 2 && n != 2 {
			t.Errorf("2 rounds: %d token counts list two baseline runs, want 2:\n%s", n, out.String())
		}
	}
}
