//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// small shapes: every kernel path, fast on 2 cores
var small = LayerSpec{Experts: 16, Hidden: 256, Intermediate: 256}

func relErr(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

func newEngine(t testing.TB, spec LayerSpec, pools, threads, maxTok, topK int, isa ISA) *Engine {
	t.Helper()
	e, err := NewEngine(withISA(Config{Threads: threads, Pools: pools, MaxTokens: maxTok, TopK: topK,
		Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate}, isa))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func sourceFor(m Method, spec LayerSpec) *RandomSource {
	dt := tensor.BF16
	switch m {
	case FP8:
		dt = tensor.F8E4M3
	case RAWINT4:
		dt = tensor.I32 // pack-quantized INT4
	}
	return &RandomSource{Spec: spec, DType: dt, Seed: 7}
}

// sourceCache hands out one sourceFor source per method and shape, so that
// tests looping over kernel levels generate the weights once (slow under
// -race). Its sources must not be modified.
type sourceCache map[LayerSpec]*RandomSource

func (c sourceCache) get(m Method, spec LayerSpec) *RandomSource {
	spec.Method = m
	s, ok := c[spec]
	if !ok {
		s = sourceFor(m, spec)
		c[spec] = s
	}
	return s
}

// maxErr is the relative error each method must stay under against the f32
// reference.
var maxErr = map[Method]float64{
	BF16: 0.01, AMXBF16: 0.01, FP8: 0.01,
	AMXINT8: 0.03, AMXINT4: 0.30, INT4KGroup: 0.22,
	RAWINT4: 0.03, // against its own codes' values: the activations' int8 rounding alone
}

func levels(t *testing.T) []ISA {
	l := DetectFeatures().levels()
	if len(l) == 0 {
		t.Skip("CPU lacks AVX2")
	}
	return l
}

// amxEmuLevel is a kernel level of the tests only: the engine as on an AMX
// CPU, with its AMX tile kernels over emulated tiles (Config.amxEmu), so
// that the AMX prefill path runs on CPUs without AMX. NewEngine refuses it
// as a Config.ISA; withISA turns it into the flag.
const amxEmuLevel ISA = "amx-emu"

// emuAMX reports whether the tests add the emulated AMX level: on CPUs
// without AMX that have what the emulation needs (AVX-512 with VNNI and
// BF16, as every AMX CPU); where the CPU has AMX, the real kernels run.
func emuAMX() bool {
	f := DetectFeatures()
	return !f.AMX && f.AVX512 && f.VNNI && f.AVX512BF16
}

// testLevels returns the kernel levels of this CPU, best first, and then
// amxEmuLevel where emuAMX.
func testLevels(t *testing.T) []ISA {
	l := levels(t)
	if emuAMX() {
		l = append(l, amxEmuLevel)
	}
	return l
}

// withISA returns cfg at kernel level isa: Config.ISA, or for amxEmuLevel
// the automatic level with the AMX kernels emulated.
func withISA(cfg Config, isa ISA) Config {
	cfg.ISA, cfg.amxEmu = isa, false
	if isa == amxEmuLevel {
		cfg.ISA, cfg.amxEmu = ISAAuto, true
	}
	return cfg
}

func TestMethodsAgainstReference(t *testing.T) {
	const topK = 4
	refs := map[string][]float32{} // the reference does not depend on ISA level or pools
	srcs := map[Method]*RandomSource{}
	for _, isa := range testLevels(t) {
		for _, pools := range []int{1, 2} {
			for _, m := range Methods {
				spec := small
				spec.Method = m
				src, ok := srcs[m]
				if !ok {
					src = sourceFor(m, spec)
					srcs[m] = src
				}
				e := newEngine(t, spec, pools, 2*pools, 64, topK, isa)
				l, err := e.NewLayer(spec, src)
				if err != nil {
					t.Fatal(err)
				}
				for _, tokens := range []int{1, 3, 48} {
					if testing.Short() && tokens == 3 {
						continue
					} // 48 tokens: experts get >= 8 (prefill kernels)
					name := fmt.Sprintf("%s/pools%d/%s/tok%d", isa, pools, m, tokens)
					t.Run(name, func(t *testing.T) {
						x, ids, w := RandomBatch(uint64(tokens), tokens, topK, spec.Hidden, spec.Experts)
						out := make([]float32, tokens*spec.Hidden)
						if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
							t.Fatal(err)
						}
						key := fmt.Sprintf("%s/%d", m, tokens)
						ref, ok := refs[key]
						if !ok {
							var err error
							if ref, err = Reference(src, spec, x, tokens, topK, ids, w, nil); err != nil {
								t.Fatal(err)
							}
							refs[key] = ref
						}
						re := relErr(out, ref)
						t.Logf("%s (%s): rel err %.5f", name, e.Kernels(m), re)
						if !(re < maxErr[m]) {
							t.Errorf("%s: relative error %.5f, want < %.3f", name, re, maxErr[m])
						}
					})
				}
				l.Close()
			}
		}
	}
}

// TestRealShapeAccuracy states each method's error on Qwen3.5-35B-A3B shapes.
func TestRealShapeAccuracy(t *testing.T) {
	if testing.Short() || os.Getenv("KT_TEST_REAL_SHAPES") == "" {
		t.Skip("set KT_TEST_REAL_SHAPES=1: real shapes take 20 s (minutes under -race)")
	}
	spec := LayerSpec{Experts: 16, Hidden: 2048, Intermediate: 512}
	const topK = 8
	// 4 tokens: 2 per expert, the decode kernels; 64: 32 per expert, the prefill kernels
	for _, tokens := range []int{4, 64} {
		for _, m := range Methods {
			spec.Method = m
			src := sourceFor(m, spec)
			e := newEngine(t, spec, 1, 2, tokens, topK, ISAAuto)
			l, err := e.NewLayer(spec, src)
			if err != nil {
				t.Fatal(err)
			}
			x, ids, w := RandomBatch(3, tokens, topK, spec.Hidden, spec.Experts)
			out := make([]float32, tokens*spec.Hidden)
			if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
				t.Fatal(err)
			}
			ref, _ := Reference(src, spec, x, tokens, topK, ids, w, nil)
			re := relErr(out, ref)
			t.Logf("%-12s H=2048 I=512, %2d tokens (%s): relative error %.5f", m, tokens, e.Kernels(m), re)
			if !(re < maxErr[m]) {
				t.Errorf("%s, %d tokens: relative error %.5f, want < %.3f", m, tokens, re, maxErr[m])
			}
			l.Close()
		}
	}
}

// TestDeterministicAcrossThreadCounts checks that outputs are bitwise the
// same for 1, 3 and 4 threads and across repeats, at the best kernel level
// and with the AMX kernels emulated (on CPUs without AMX; 40 tokens x 4
// over 16 experts: most experts take the prefill kernels).
func TestDeterministicAcrossThreadCounts(t *testing.T) {
	const tokens, topK = 40, 4
	isas := []ISA{ISAAuto}
	if emuAMX() {
		isas = append(isas, amxEmuLevel)
	}
	srcs := sourceCache{}
	for _, isa := range isas {
		for _, m := range []Method{AMXINT8, AMXBF16, BF16, AMXINT4} {
			if m == AMXINT4 && isa != amxEmuLevel {
				continue // AMXINT4 shares the int8 kernels' engine paths but for the AMX unpack
			}
			spec := small
			spec.Method = m
			src := srcs.get(m, spec)
			x, ids, w := RandomBatch(9, tokens, topK, spec.Hidden, spec.Experts)
			var first []float32
			for _, threads := range []int{1, 3, 4} {
				e := newEngine(t, spec, 1, threads, tokens, topK, isa)
				l, err := e.NewLayer(spec, src)
				if err != nil {
					t.Fatal(err)
				}
				for rep := 0; rep < 2; rep++ {
					out := make([]float32, tokens*spec.Hidden)
					if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
						t.Fatal(err)
					}
					if first == nil {
						first = out
						continue
					}
					for i := range out {
						if math.Float32bits(out[i]) != math.Float32bits(first[i]) {
							t.Fatalf("%s/%s: %d threads rep %d: out[%d] = %g, 1 thread gave %g", isa, m, threads, rep, i, out[i], first[i])
						}
					}
				}
				l.Close()
			}
		}
	}
}

func TestSkipMaskAndBadIDs(t *testing.T) {
	const tokens, topK = 6, 4
	spec := small
	spec.Method = AMXBF16
	src := sourceFor(spec.Method, spec)
	e := newEngine(t, spec, 1, 2, tokens, topK, ISAAuto)
	l, err := e.NewLayer(spec, src)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	x, ids, w := RandomBatch(5, tokens, topK, spec.Hidden, spec.Experts)
	ids[1], ids[5] = -1, int32(spec.Experts+3) // masked by the router / out of range
	skip := make([]bool, spec.Experts)
	for i := 0; i < spec.Experts; i += 3 {
		skip[i] = true
	}
	if err := l.SetSkip(skip); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, tokens*spec.Hidden)
	if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
		t.Fatal(err)
	}
	ref, _ := Reference(src, spec, x, tokens, topK, ids, w, skip)
	if re := relErr(out, ref); re > 0.01 {
		t.Errorf("with skip mask: relative error %.4f", re)
	}
	// all skipped: output zero
	for i := range skip {
		skip[i] = true
	}
	_ = l.SetSkip(skip)
	for i := range out {
		out[i] = 1
	}
	if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
		t.Fatal(err)
	}
	for i, v := range out {
		if v != 0 {
			t.Fatalf("all experts skipped: out[%d] = %g, want 0", i, v)
		}
	}
}

func TestAsyncQueueIncrementalBF16(t *testing.T) {
	const tokens, topK = 5, 4
	spec := small
	spec.Method = AMXINT8
	e := newEngine(t, spec, 2, 2, tokens, topK, ISAAuto)
	var layers []*Layer
	var srcs []*RandomSource
	for i := 0; i < 3; i++ {
		src := sourceFor(spec.Method, spec)
		src.Seed = uint64(100 + i)
		l, err := e.NewLayer(spec, src)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		layers, srcs = append(layers, l), append(srcs, src)
	}
	x, ids, w := RandomBatch(11, tokens, topK, spec.Hidden, spec.Experts)
	xb := make([]uint16, len(x))
	for i, v := range x {
		xb[i] = tensor.F32ToBF16(v)
		x[i] = tensor.BF16ToF32(xb[i])
	}
	// three layers queued back to back, all adding into one f32 output
	out := make([]float32, tokens*spec.Hidden)
	for _, l := range layers {
		if err := l.Submit(&Batch{Tokens: tokens, TopK: topK, XBF16: xb, IDs: ids, Weights: w, Out: out, Incremental: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(out))
	for _, src := range srcs {
		ref, _ := Reference(src, spec, x, tokens, topK, ids, w, nil)
		for i := range ref {
			want[i] += ref[i]
		}
	}
	if re := relErr(out, want); re > maxErr[AMXINT8] {
		t.Errorf("queued incremental: relative error %.4f", re)
	}
	// bf16 output
	ob := make([]uint16, tokens*spec.Hidden)
	if err := layers[0].Forward(&Batch{Tokens: tokens, TopK: topK, XBF16: xb, IDs: ids, Weights: w, OutBF16: ob}); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(ob))
	for i, b := range ob {
		got[i] = tensor.BF16ToF32(b)
	}
	ref, _ := Reference(srcs[0], spec, x, tokens, topK, ids, w, nil)
	if re := relErr(got, ref); re > maxErr[AMXINT8] {
		t.Errorf("bf16 output: relative error %.4f", re)
	}
}

func TestRefusals(t *testing.T) {
	f := DetectFeatures()
	if !f.AMX {
		_, err := NewEngine(Config{ISA: ISAAMX, MaxTokens: 1, TopK: 1, Experts: 1, Hidden: 128, Intermediate: 128})
		if err == nil || !strings.Contains(err.Error(), "available:") {
			t.Errorf("AMX on a CPU without it: err = %v, want a refusal naming the alternatives", err)
		}
	}
	if _, err := NewEngine(Config{ISA: "sse9", MaxTokens: 1, TopK: 1, Experts: 1, Hidden: 128, Intermediate: 128}); err == nil {
		t.Error("unknown ISA accepted")
	}
	if _, err := NewEngine(Config{MaxTokens: 1, TopK: 1, Experts: 1, Hidden: 100, Intermediate: 128}); err == nil {
		t.Error("hidden 100 accepted")
	}
	if _, err := NewEngine(Config{Pools: 2, NUMANodes: []int{0}, MaxTokens: 1, TopK: 1, Experts: 1, Hidden: 128, Intermediate: 128}); err == nil {
		t.Error("2 pools with 1 NUMA node accepted")
	}
	for _, t1 := range []int{-2, 4} {
		if _, err := NewEngine(Config{AMXTileT1: t1, MaxTokens: 1, TopK: 1, Experts: 1, Hidden: 128, Intermediate: 128}); err == nil {
			t.Errorf("AMXTileT1 %d accepted", t1)
		}
	}
	spec := small
	spec.Method = AMXINT4
	e := newEngine(t, spec, 1, 1, 4, 2, ISAAuto)
	bad := spec
	bad.Hidden = 512
	if _, err := e.NewLayer(bad, sourceFor(AMXINT4, bad)); err == nil {
		t.Error("layer shape differing from the engine accepted")
	}
	l, err := e.NewLayer(spec, sourceFor(AMXINT4, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	x, ids, w := RandomBatch(1, 5, 2, spec.Hidden, spec.Experts)
	out := make([]float32, 5*spec.Hidden)
	if err := l.Forward(&Batch{Tokens: 5, TopK: 2, X: x, IDs: ids, Weights: w, Out: out}); err == nil {
		t.Error("5 tokens accepted by an engine sized for 4")
	}
	if err := l.Forward(&Batch{Tokens: 2, TopK: 2, X: x[:10], IDs: ids, Weights: w, Out: out}); err == nil {
		t.Error("short input accepted")
	}
	wrong := &RandomSource{Spec: spec, DType: tensor.F8E4M3}
	spec2 := spec
	spec2.Method = BF16
	if _, err := e.NewLayer(spec2, wrong); err == nil || !strings.Contains(err.Error(), "dtype") {
		t.Errorf("fp8 weights for method BF16: err = %v", err)
	}
}

func TestReadProbeSample(t *testing.T) {
	p, err := NewReadProbe(8<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bw, err := p.Sample(2)
	if err != nil {
		t.Fatal(err)
	}
	if bw <= 0 {
		t.Fatalf("bandwidth %g", bw)
	}
}

func TestReadProbeMedian(t *testing.T) {
	p, err := NewReadProbe(8<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		if bw, err := p.Sample(1); err != nil || bw <= 0 {
			t.Fatalf("sample %g, %v", bw, err)
		}
	}
	s := p.Samples()
	if len(s) != 3 {
		t.Fatalf("%d samples, want 3", len(s))
	}
	if m := p.Median(); m != Median(s) || m < slices.Min(s) || m > slices.Max(s) {
		t.Fatalf("median %g of %v", m, s)
	}
	p.Close()
	if _, err := p.Sample(1); err == nil {
		t.Fatal("sample after close: no error")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{90, 146, 100, 95}, 97.5},
	} {
		in := append([]float64(nil), c.in...)
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %g, want %g", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("Median modified its input: %v", c.in)
		}
	}
}
