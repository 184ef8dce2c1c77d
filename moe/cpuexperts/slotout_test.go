//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"testing"
	"unsafe"
)

// TestSlotOutputsBF16 compares the default bf16 per-slot down outputs with
// Config.SlotOutputsF32 for the packed methods at every kernel level (the
// AMX prefill path emulated on CPUs without AMX), one and two pools, the
// phased and the fused path. The two must differ (the default rounds each
// expert's output to bf16) by no more than that rounding: every output
// element is a weighted sum of at most topK x pools rounded values, each
// off by at most 2^-9 of itself (measured 1.63e-3 to 1.68e-3 relative);
// the bound is 2^-8. A slot output stored to the wrong row or column, or
// read with the wrong element size, fails it. Where the activations are f32
// (bf16 weights without AVX512_BF16 or AMX) the outputs stay f32 and the
// two must be bitwise equal. Both stay within the method's error against
// the f32 reference.
func TestSlotOutputsBF16(t *testing.T) {
	f := DetectFeatures()
	for _, c := range pairCases(t, []Method{AMXBF16, AMXINT8, AMXINT4}, 5, true) {
		out := forwardPair(t, c, func(cfg *Config) { cfg.SlotOutputsF32 = true })
		d := relErr(out[0], out[1])
		t.Logf("%s: bf16 vs f32 slot outputs: %.2e relative", c.name, d)
		f32Act := c.spec.Method == AMXBF16 && !(c.isa == ISAAMX || c.isa == amxEmuLevel || c.isa == ISAAVX512 && f.AVX512BF16) // pack.c kt_act_format
		if f32Act {
			if d != 0 {
				t.Errorf("%s: f32 activations, yet the slot outputs were rounded (%.3g relative)", c.name, d)
			}
			continue
		}
		if !(d > 0 && d < 1.0/256) {
			t.Errorf("%s: bf16 and f32 slot outputs differ by %.3g relative, want in (0, 2^-8)", c.name, d)
		}
	}
}

// pairCase is one batch of a method at one kernel level, pool count and
// path (fused or phased), with its f32 reference.
type pairCase struct {
	isa          ISA
	spec         LayerSpec
	src          Source
	pools        int
	fused        bool
	tokens, topK int
	x            []float32
	ids          []int32
	w, ref       []float32
	name         string
	base         func(*Config) // applied to both engines (nil: none)
}

// forwardPair runs the case on the default engine and on one whose Config
// set changes (both first changed by c.base), and returns both outputs;
// each must stay within the method's error against the reference (unless
// c.ref is nil).
func forwardPair(t *testing.T, c pairCase, set func(*Config)) (out [2][]float32) {
	t.Helper()
	for i := range out {
		cfg := withISA(Config{Threads: 2, Pools: c.pools, MaxTokens: c.tokens, TopK: c.topK, Experts: c.spec.Experts,
			Hidden: c.spec.Hidden, Intermediate: c.spec.Intermediate, fusedMaxSlots: -1}, c.isa)
		if c.fused {
			cfg.fusedMaxSlots = c.tokens * c.topK
		}
		if c.base != nil {
			c.base(&cfg)
		}
		if i == 1 {
			set(&cfg)
		}
		l, err := newEngineCfg(t, cfg).NewLayer(c.spec, c.src)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = make([]float32, c.tokens*c.spec.Hidden)
		if err := l.Forward(&Batch{Tokens: c.tokens, TopK: c.topK, X: c.x, IDs: c.ids, Weights: c.w, Out: out[i]}); err != nil {
			t.Fatal(err)
		}
		l.Close()
		if c.ref == nil {
			continue
		}
		if re := relErr(out[i], c.ref); !(re < maxErr[c.spec.Method]) {
			t.Errorf("%s (engine %d): relative error %.5f against the reference, want < %.3f", c.name, i, re, maxErr[c.spec.Method])
		}
	}
	return out
}

// pairCases lists, per kernel level and method of methods, the 48-token
// batch of seed on the phased path over one and two pools and on the fused
// path, with its reference.
func pairCases(t *testing.T, methods []Method, seed uint64, twoPools bool) []pairCase {
	const topK, tokens = 4, 48
	srcs := sourceCache{}
	var cs []pairCase
	for _, isa := range testLevels(t) {
		for _, m := range methods {
			spec := small
			spec.Method = m
			src := srcs.get(m, spec)
			x, ids, w := RandomBatch(seed, tokens, topK, spec.Hidden, spec.Experts)
			ref, err := Reference(src, spec, x, tokens, topK, ids, w, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, pc := range []struct {
				pools int
				fused bool
			}{{1, false}, {1, true}, {2, false}} {
				if pc.pools > 1 && !twoPools {
					continue
				}
				cs = append(cs, pairCase{isa: isa, spec: spec, src: src, pools: pc.pools, fused: pc.fused, tokens: tokens, topK: topK,
					x: x, ids: ids, w: w, ref: ref, name: fmt.Sprintf("%s/%s/pools%d/fused=%v", isa, m, pc.pools, pc.fused)})
			}
		}
	}
	return cs
}

// TestOutputStores checks the phased path's output stores: around the
// caches into 64-byte aligned rows, plain where the rows are not aligned
// (the output one float or one bf16 off a 64-byte boundary), through the
// caches with Config.OutputCached, and with the slot outputs stored through
// the caches (Config.SlotOutputsCached): bitwise the same outputs, f32 and
// bf16, plain and incremental, on every kernel level.
func TestOutputStores(t *testing.T) {
	const topK, tokens = 4, 48
	srcs := sourceCache{}
	for _, isa := range testLevels(t) {
		m := AMXINT8
		spec := small
		spec.Method = m
		src := srcs.get(m, spec)
		x, ids, w := RandomBatch(11, tokens, topK, spec.Hidden, spec.Experts)
		n := tokens * spec.Hidden
		prev := make([]float32, n)
		for i := range prev {
			prev[i] = float32(i%5) - 2
		}
		for _, bf := range []bool{false, true} {
			for _, incr := range []bool{false, true} {
				var ref []float32
				for c, cfgv := range []struct{ outCached, yCached, offset bool }{{}, {offset: true}, {outCached: true}, {yCached: true}} {
					e := newEngineCfg(t, withISA(Config{Threads: 2, MaxTokens: tokens, TopK: topK, Experts: spec.Experts,
						Hidden: spec.Hidden, Intermediate: spec.Intermediate, fusedMaxSlots: -1,
						OutputCached: cfgv.outCached, SlotOutputsCached: cfgv.yCached}, isa))
					l, err := e.NewLayer(spec, src)
					if err != nil {
						t.Fatal(err)
					}
					b := &Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Incremental: incr}
					// a 64-byte aligned buffer of n+32 values; the rows start
					// at its beginning, or one element in
					off := 0
					if cfgv.offset {
						off = 1
					}
					got := make([]float32, n)
					if bf {
						buf := alignedU16(n + 32)
						b.OutBF16 = buf[off : off+n]
						for i := range b.OutBF16 {
							b.OutBF16[i] = uint16(math.Float32bits(prev[i]) >> 16) // exact: small integers
						}
					} else {
						buf := alignedF32(n + 32)
						b.Out = buf[off : off+n]
						copy(b.Out, prev)
					}
					if err := l.Forward(b); err != nil {
						t.Fatal(err)
					}
					l.Close()
					for i := range got {
						if bf {
							got[i] = math.Float32frombits(uint32(b.OutBF16[i]) << 16)
						} else {
							got[i] = b.Out[i]
						}
					}
					if c == 0 {
						ref = got
						continue
					}
					if d := diffCount(got, ref); d > 0 {
						t.Errorf("%s bf16=%v incr=%v %+v: %d of %d outputs differ from the default stores", isa, bf, incr, cfgv, d, n)
					}
				}
			}
		}
	}
}

// alignedF32 returns n float32s starting on a 64-byte boundary.
func alignedF32(n int) []float32 {
	b := make([]float32, n+16)
	o := int((64 - uintptr(unsafe.Pointer(&b[0]))%64) % 64 / 4)
	return b[o : o+n]
}

// alignedU16 returns n uint16s starting on a 64-byte boundary.
func alignedU16(n int) []uint16 {
	b := make([]uint16, n+32)
	o := int((64 - uintptr(unsafe.Pointer(&b[0]))%64) % 64 / 2)
	return b[o : o+n]
}

// TestIntermediateBF16 compares the int8 methods' default bf16 h (rounded
// before its int8 quantization) with Config.IntermediateF32, on the phased
// and the fused path and every kernel level: the outputs must differ (the
// rounding moves some values across an int8 step) by less than half the
// method's error bound (measured 7.6e-3 to 7.8e-3 relative; bound 0.015:
// two int8 quantizations of nearly equal h differ by part of the
// quantization noise itself), and both stay within the method's error
// against the f32 reference (on real widths the int8 error moves from
// 0.02532 to 0.02543, TestRealShapeAccuracy).
func TestIntermediateBF16(t *testing.T) {
	for _, c := range pairCases(t, []Method{AMXINT8, AMXINT4}, 13, false) {
		out := forwardPair(t, c, func(cfg *Config) { cfg.IntermediateF32 = true })
		d := relErr(out[0], out[1])
		t.Logf("%s: bf16 vs f32 h: %.2e relative", c.name, d)
		if !(d > 0 && d < 0.015) {
			t.Errorf("%s: bf16 and f32 h give outputs %.3g apart, want in (0, 0.015)", c.name, d)
		}
	}
}
