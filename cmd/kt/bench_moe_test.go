//go:build linux && amd64 && cgo

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/moe/enginebench"
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
	shape := enginebench.BenchShape{Name: "x", Experts: 8, Hidden: 128, Intermediate: 64, TopK: 2}
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
	shape := enginebench.BenchShape{Name: "x"}
	pt := func(sec, torch float64) moePoint {
		return moePoint{r: enginebench.BenchResult{Method: cpuexperts.AMXBF16, Tokens: 4096, Seconds: sec, FLOPs: 1e12}, near: 1e11, torch: torch}
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
	shape := enginebench.BenchShape{Name: "tiny", Experts: 8, Hidden: 128, Intermediate: 64, TopK: 2}
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
		recs, err := benchShape(e, probe, nil, shape, []cpuexperts.Method{cpuexperts.AMXBF16, cpuexperts.AMXINT8}, []int{1, 40}, 1<<20, o, &out)
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

// fakeTiles stands in for the tile probe: a fixed rate per format, and a
// count of the samples taken.
type fakeTiles struct {
	tf      [2]float64
	samples [2][]float64
}

func (f *fakeTiles) Sample(i8 bool) (float64, error) {
	i := map[bool]int{false: 0, true: 1}[i8]
	f.samples[i] = append(f.samples[i], f.tf[i])
	return f.tf[i], nil
}
func (f *fakeTiles) Samples(i8 bool) []float64 { return f.samples[map[bool]int{false: 0, true: 1}[i8]] }
func (f *fakeTiles) Cores() int                { return 2 }

// TestBenchShapeTileProbe: the tile probe is sampled once per round before
// each row whose method runs on tiles and whose experts average a full
// 32-row block, in that method's format; those rows carry their rate
// against it and the probe ÷ the baseline, and the others none.
func TestBenchShapeTileProbe(t *testing.T) {
	shape := enginebench.BenchShape{Name: "tiny", Experts: 8, Hidden: 128, Intermediate: 64, TopK: 2}
	py := fakePython(t, map[int]string{
		1:   `{"tokens": 1, "seconds": 1, "tflops": 0.001, "variant": "fused", "threads": 2, "all": {"fused@2": 0.001}}`,
		128: `{"tokens": 128, "seconds": 1, "tflops": 0.002, "variant": "index", "threads": 2, "all": {"index@2": 0.002}}`,
	})
	e, err := cpuexperts.NewEngine(cpuexperts.Config{Threads: 2, MaxTokens: 128, TopK: shape.TopK, Experts: shape.Experts,
		Hidden: shape.Hidden, Intermediate: shape.Intermediate})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	probe, err := cpuexperts.NewReadProbe(1<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	fake := &fakeTiles{tf: [2]float64{0.5, 1}}
	tiles := &benchTiles{probe: fake, format: func(m cpuexperts.Method) (bool, bool) {
		return m == cpuexperts.AMXINT8, m != cpuexperts.BF16
	}}
	o := moeBenchOpts{compareTorch: true, python: py, rounds: 2, minTime: time.Millisecond, bwBytes: 1 << 20, phases: true}
	var out strings.Builder
	methods := []cpuexperts.Method{cpuexperts.AMXBF16, cpuexperts.AMXINT8, cpuexperts.BF16}
	recs, err := benchShape(e, probe, tiles, shape, methods, []int{1, 128}, 1<<20, o, &out)
	if err != nil {
		t.Fatal(err)
	}
	if n0, n1 := len(fake.samples[0]), len(fake.samples[1]); n0 != 2 || n1 != 2 {
		t.Errorf("samples: bf16 %d, int8 %d; want 2 each (two rounds of one 128-token row)", n0, n1)
	}
	for _, r := range recs {
		want := map[string]float64{"AMXBF16": 0.5, "AMXINT8": 1}[r.Method]
		if r.Tokens == 1 {
			want = 0
		}
		if r.TileTF != want {
			t.Errorf("%s at %d tokens: tile %v, want %v", r.Method, r.Tokens, r.TileTF, want)
			continue
		}
		if want == 0 {
			if r.XTile != 0 || r.TileXTorch != 0 {
				t.Errorf("%s at %d tokens: tile ratios %v, %v without a sample", r.Method, r.Tokens, r.XTile, r.TileXTorch)
			}
			continue
		}
		// one round's TFLOPS ÷ its sample; the sample ÷ the baseline (0.002)
		if r.XTile <= 0 || r.XTileMin > r.XTile || r.XTile > r.XTileMax || r.TileXTorch != want/0.002 {
			t.Errorf("%s at %d tokens: x_tile %v (%v-%v), tile_xtorch %v (want %v)", r.Method, r.Tokens, r.XTile, r.XTileMin, r.XTileMax, r.TileXTorch, want/0.002)
		}
		line := fmt.Sprintf("%s at 128 tokens: %.2f TFLOPS, %.0f%% of the tile probe", r.Method, r.TFLOPS, 100*r.XTile)
		if !strings.Contains(out.String(), line) {
			t.Errorf("no line %q in:\n%s", line, out.String())
		}
	}
	for _, want := range []string{"tile probe (the 2x2 tile block", "bf16 median 0.50 TFLOPS (2 samples", "int8 median 1.00 TFLOPS (2 samples",
		"tile probe ÷ torch 250.00x", "tile probe ÷ torch 500.00x"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestBenchTilesPrintPhases: with --phases a sampled row states its gate/up
// and down phases' rates (their flops over their time) against the probe.
func TestBenchTilesPrintPhases(t *testing.T) {
	shape := enginebench.BenchShape{Name: "x", Experts: 128, Hidden: 2048, Intermediate: 768, TopK: 8}
	fake := &fakeTiles{tf: [2]float64{8, 16}}
	fake.Sample(false)
	bt := &benchTiles{probe: fake}
	// 4096 tokens: 32768 pairs; one projection 2·32768·2048·768 = 103.08 GFLOP;
	// gate/up 206.16 GFLOP in 32.21 ms = 6.40 TFLOPS (80 % of 8), down in 16.11 ms = 6.40 (80 %)
	rec := moeRecord{Method: "AMXBF16", Tokens: 4096, TFLOPS: 6, TileTF: 8, XTile: 0.75, XTileMin: 0.7, XTileMax: 0.8, TileXTorch: 4.5,
		PhaseMs: map[string]float64{"gate/up": 32.212, "down": 16.106}}
	var out strings.Builder
	bt.print(&out, shape, []moeRecord{rec, {Method: "BF16", Tokens: 4096}})
	want := "AMXBF16 at 4096 tokens: 6.00 TFLOPS, 75% of the tile probe (median of the rounds, 70-80%); gate/up 80%; down 80%; tile probe ÷ torch 4.50x"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	if strings.Contains(out.String(), "BF16 at 4096") && strings.Count(out.String(), "at 4096 tokens") != 1 {
		t.Errorf("a row without a sample is stated:\n%s", out.String())
	}
	var none strings.Builder
	(*benchTiles)(nil).print(&none, shape, []moeRecord{rec})
	if none.Len() != 0 {
		t.Errorf("no probe: printed %q", none.String())
	}
}

// TestMoEShapes: --model names (any case, comma-separated, all) and
// --model-path configs of any MoE architecture resolve to layer shapes in
// order; unknown names, dense models and missing configs are refused with
// what to do instead.
func TestMoEShapes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "DeepSeek-V3")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `{"architectures":["DeepseekV3ForCausalLM"],"hidden_size":7168,"moe_intermediate_size":2048,"n_routed_experts":256,"num_experts_per_tok":8}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	dense := t.TempDir()
	if err := os.WriteFile(filepath.Join(dense, "config.json"), []byte(`{"hidden_size":4096,"intermediate_size":12288}`), 0o644); err != nil {
		t.Fatal(err)
	}
	names := func(ss []enginebench.BenchShape) string {
		var n []string
		for _, s := range ss {
			n = append(n, fmt.Sprintf("%s:%d/%d/%d/%d", s.Name, s.Experts, s.Hidden, s.Intermediate, s.TopK))
		}
		return strings.Join(n, " ")
	}
	cases := []struct {
		models string
		paths  []string
		want   string // names; "" with err
		err    string
	}{
		{models: "", want: "qwen3.5-35b-a3b:256/2048/512/8 qwen3-30b-a3b:128/2048/768/8"},
		{models: "all", want: "qwen3.5-35b-a3b:256/2048/512/8 qwen3-30b-a3b:128/2048/768/8"},
		{models: "Qwen3-30B-A3B", want: "qwen3-30b-a3b:128/2048/768/8"},
		{models: "qwen3-next-80b-a3b, kimi-k2", want: "qwen3-next-80b-a3b:512/2048/512/10 kimi-k2:384/7168/2048/8"},
		{models: "", paths: []string{dir}, want: "DeepSeek-V3 (DeepseekV3ForCausalLM):256/7168/2048/8"},
		{models: "deepseek-v3", paths: []string{dir + "/"}, want: "deepseek-v3:256/7168/2048/8 DeepSeek-V3 (DeepseekV3ForCausalLM):256/7168/2048/8"},
		{models: "qwen4", err: `unknown --model "qwen4" (known: qwen3.5-35b-a3b, qwen3-30b-a3b, qwen3-next-80b-a3b, deepseek-v3, kimi-k2, all; or --model-path`},
		{paths: []string{dense}, err: "not an MoE model"},
		{paths: []string{filepath.Join(dir, "missing")}, err: "--model-path"},
	}
	for _, c := range cases {
		got, err := moeShapes(c.models, c.paths)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q %v: error %v, want one containing %q", c.models, c.paths, err, c.err)
			}
			continue
		}
		if err != nil || names(got) != c.want {
			t.Errorf("%q %v: %s, %v; want %s", c.models, c.paths, names(got), err, c.want)
		}
	}
}

// TestShapeMethods: a method whose layout a shape breaks is left out with its
// reason printed; a shape no method can run is an error naming each reason.
func TestShapeMethods(t *testing.T) {
	all := []cpuexperts.Method{cpuexperts.AMXINT4, cpuexperts.AMXINT8, cpuexperts.AMXBF16}
	var out strings.Builder
	s := enginebench.BenchShape{Name: "gpt-oss-like", Experts: 128, Hidden: 2944, Intermediate: 2880, TopK: 4}
	got, err := shapeMethods(s, all, 1, &out)
	if err != nil || !slices.Equal(got, []cpuexperts.Method{cpuexperts.AMXINT8, cpuexperts.AMXBF16}) {
		t.Fatalf("methods %v, %v", got, err)
	}
	if !strings.Contains(out.String(), "# gpt-oss-like: AMXINT4 skipped: method AMXINT4 needs each pool's intermediate slice (2880") {
		t.Errorf("no reason printed:\n%s", out.String())
	}
	s.Hidden = 2880 // not a multiple of 128: nothing runs
	if _, err := shapeMethods(s, all, 1, io.Discard); err == nil || !strings.Contains(err.Error(), "no method can run this layer") ||
		strings.Count(err.Error(), "not a multiple of 128") != 3 {
		t.Errorf("no method: %v", err)
	}
}

// TestBenchLayersMemory: benchLayers refuses a layer the memory cannot hold,
// naming the sizes, and stops the round-robin early (saying so) where the
// memory holds fewer layers than the cache rule asks for.
func TestBenchLayersMemory(t *testing.T) {
	shape := enginebench.BenchShape{Name: "tiny", Experts: 8, Hidden: 128, Intermediate: 64, TopK: 2}
	e, err := cpuexperts.NewEngine(cpuexperts.Config{Threads: 1, MaxTokens: 4, TopK: shape.TopK, Experts: shape.Experts,
		Hidden: shape.Hidden, Intermediate: shape.Intermediate})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	lb := enginebench.LayerBytesEstimate(shape, cpuexperts.AMXBF16)
	if lb != 8*3*128*64*2 {
		t.Fatalf("estimate %d bytes", lb)
	}
	var out strings.Builder
	if _, err := benchLayers(e, shape, cpuexperts.AMXBF16, 1<<30, func() int64 { return benchMemReserve + lb/2 }, &out); err == nil ||
		!strings.Contains(err.Error(), "one AMXBF16 layer of tiny takes") {
		t.Errorf("too little memory: %v", err)
	}
	// room for the first and a second layer, then none
	calls := 0
	room := func() int64 {
		calls++
		if calls <= 2 {
			return benchMemReserve + 3*lb
		}
		return benchMemReserve + lb/2
	}
	ls, err := benchLayers(e, shape, cpuexperts.AMXBF16, 1<<30, room, &out)
	if err != nil {
		t.Fatal(err)
	}
	closeLayers(ls)
	if len(ls) != 2 || !strings.Contains(out.String(), "memory held the round-robin to 2 layer(s)") {
		t.Errorf("%d layers:\n%s", len(ls), out.String())
	}
	// no limit: the cache rule (8 × a 1-byte cache is one layer)
	ls, err = benchLayers(e, shape, cpuexperts.AMXBF16, 1, nil, io.Discard)
	if err != nil || len(ls) != 1 {
		t.Errorf("no limit: %d layers, %v", len(ls), err)
	}
	closeLayers(ls)
}
