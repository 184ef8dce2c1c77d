//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"testing"
)

// TestSlotOutputsBF16 compares the default bf16 per-slot down outputs with
// Config.SlotOutputsF32 for the packed methods at every kernel level (the
// AMX prefill path emulated on CPUs without AMX), one and two pools, the
// phased and the fused path. The two must differ (the default rounds each
// expert's output to bf16) by no more than that rounding: every output
// element is a weighted sum of at most topK x pools rounded values, each
// off by at most 2^-9 of itself (measured 1.64e-3 to 1.67e-3 relative);
// the bound is 2^-8. A slot output stored to the wrong row or column, or
// read with the wrong element size, fails it. Where the activations are f32
// (bf16 weights without AVX512_BF16 or AMX) the outputs stay f32 and the
// two must be bitwise equal. Both stay within the method's error against
// the f32 reference.
func TestSlotOutputsBF16(t *testing.T) {
	const topK, tokens = 4, 48
	srcs := sourceCache{}
	f := DetectFeatures()
	for _, isa := range testLevels(t) {
		for _, m := range []Method{AMXBF16, AMXINT8, AMXINT4} {
			spec := small
			spec.Method = m
			src := srcs.get(m, spec)
			x, ids, w := RandomBatch(5, tokens, topK, spec.Hidden, spec.Experts)
			ref, err := Reference(src, spec, x, tokens, topK, ids, w, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, pools := range []int{1, 2} {
				for _, fused := range []bool{false, true} {
					if fused && pools > 1 {
						continue // the fused path is one pool's
					}
					name := fmt.Sprintf("%s/%s/pools%d/fused=%v", isa, m, pools, fused)
					var out [2][]float32
					for i, f32 := range []bool{false, true} {
						cfg := withISA(Config{Threads: 2, Pools: pools, MaxTokens: tokens, TopK: topK, Experts: spec.Experts,
							Hidden: spec.Hidden, Intermediate: spec.Intermediate, SlotOutputsF32: f32, fusedMaxSlots: -1}, isa)
						if fused {
							cfg.fusedMaxSlots = tokens * topK
						}
						e := newEngineCfg(t, cfg)
						l, err := e.NewLayer(spec, src)
						if err != nil {
							t.Fatal(err)
						}
						out[i] = make([]float32, tokens*spec.Hidden)
						if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out[i]}); err != nil {
							t.Fatal(err)
						}
						l.Close()
						if re := relErr(out[i], ref); !(re < maxErr[m]) {
							t.Errorf("%s f32=%v: relative error %.5f against the reference, want < %.3f", name, f32, re, maxErr[m])
						}
					}
					d := relErr(out[0], out[1])
					t.Logf("%s: bf16 vs f32 slot outputs: %.2e relative", name, d)
					f32Act := m == AMXBF16 && !(isa == ISAAMX || isa == amxEmuLevel || isa == ISAAVX512 && f.AVX512BF16) // pack.c kt_act_format
					if f32Act {
						if d != 0 {
							t.Errorf("%s: f32 activations, yet the slot outputs were rounded (%.3g relative)", name, d)
						}
						continue
					}
					if !(d > 0 && d < 1.0/256) {
						t.Errorf("%s: bf16 and f32 slot outputs differ by %.3g relative, want in (0, 2^-8)", name, d)
					}
				}
			}
		}
	}
}
