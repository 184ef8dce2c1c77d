package deepseekv3

import (
	"math"
	"testing"

	"github.com/ktserve/kt/modelconfig"
)

// TestAttnParams checks the rotary frequencies, the cos/sin factor and the
// softmax scale against values transcribed from transformers'
// _compute_yarn_parameters and DeepseekV3Attention (Python, float32 where
// torch computes in float32).
func TestAttnParams(t *testing.T) {
	yarn := func(factor float64, orig int, mscale float64) modelconfig.Rope {
		return modelconfig.Rope{Theta: 10000, Type: "yarn", Factor: factor, OriginalMaxPositions: orig,
			BetaFast: 32, BetaSlow: 1, MScale: mscale, MScaleAllDim: 1, Truncate: true, PartialRotaryFactor: 1}
	}
	for _, tc := range []struct {
		name             string
		mla              modelconfig.MLADims
		rope             modelconfig.Rope
		invFreq          []float64 // the first few
		attnFactor, scal float64
	}{
		{"yarn mscale 0.8 (deepseekv3-c)", modelconfig.MLADims{KVLoRARank: 32, QKNopeHeadDim: 32, QKRopeHeadDim: 16, VHeadDim: 24},
			yarn(8, 64, 0.8), []float64{1.0, 0.22399466608961424, 0.041666667287548385, 0.0039528473280370235, 0.0012499999720603228},
			0.9655705682335599, 0.21060714172072303},
		{"DeepSeek-V3 as published", modelconfig.MLADims{KVLoRARank: 512, QKNopeHeadDim: 128, QKRopeHeadDim: 64, VHeadDim: 128},
			yarn(40, 4096, 1), []float64{1.0, 0.7498942017555237, 0.5623413324356079, 0.4216965138912201, 0.3162277638912201,
				0.23713736236095428, 0.17782793939113617, 0.1333521455526352, 0.10000000149011612, 0.07498941570520401,
				0.05623412877321243, 0.03900692546561074, 0.02687936183065176, 0.018378145307696492},
			1, 0.1352337788608801},
		{"default rope", modelconfig.MLADims{KVLoRARank: 32, QKNopeHeadDim: 32, QKRopeHeadDim: 16, VHeadDim: 24},
			modelconfig.Rope{Theta: 10000, Type: "default", Factor: 1, PartialRotaryFactor: 1}, []float64{1, 0.31622776601683794, 0.1},
			1, 1 / math.Sqrt(48)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{NumHeads: 4, MLA: tc.mla, Rope: tc.rope}
			c.Rope.RotaryDim = tc.mla.QKRopeHeadDim
			p := AttnParams(c)
			for i, want := range tc.invFreq {
				if got := float64(p.Rope.InvFreq[i]); math.Abs(got-want) > 1e-6*want {
					t.Errorf("inv freq %d = %.9g, want %.9g", i, got, want)
				}
			}
			if len(p.Rope.InvFreq) != tc.mla.QKRopeHeadDim/2 {
				t.Errorf("%d frequencies", len(p.Rope.InvFreq))
			}
			if math.Abs(float64(p.Rope.AttnFactor)-tc.attnFactor) > 1e-6 || math.Abs(float64(p.Scale)-tc.scal) > 1e-6 {
				t.Errorf("cos/sin factor %g, scale %g; want %g, %g", p.Rope.AttnFactor, p.Scale, tc.attnFactor, tc.scal)
			}
		})
	}
}
