package deepseekv3

import (
	"math"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/modelconfig"
)

// Config is the parsed config.json (modelconfig's, with the derived
// per-layer facts and the MLA, routing and YaRN fields).
type Config = modelconfig.Config

// ReadConfig reads dir/config.json with modelconfig and checks that this
// model definition can run it; errors name the file and the field.
func ReadConfig(dir string) (*Config, error) {
	return runbase.ReadConfig(dir, modelconfig.DeepseekV3)
}

// ParseConfig parses a config.json body like ReadConfig.
func ParseConfig(data []byte) (*Config, error) {
	return runbase.ParseConfig(data, modelconfig.DeepseekV3)
}

// yarnMScale is transformers' yarn_get_mscale: 0.1·m·ln(scale) + 1 above
// scale 1, else 1.
func yarnMScale(scale, m float64) float64 {
	if scale <= 1 {
		return 1
	}
	return 0.1*m*math.Log(scale) + 1
}

// AttnParams returns the layers' MLA parameters as transformers computes
// them: the rotary frequencies of qk_rope_head_dim (default, or YaRN's
// blend of interpolated and extrapolated frequencies with its attention
// factor on cos and sin), the softmax scale qk_head_dim^-0.5 (times
// yarn_get_mscale(factor, mscale_all_dim)² under a scaled rope type), and
// kv_a_layernorm's epsilon (the module default 1e-6: transformers does not
// pass rms_norm_eps to it).
func AttnParams(c *Config) backend.MLAParams {
	m := c.MLA
	dim := c.Rope.RotaryDim
	p := backend.MLAParams{
		MLAShape: backend.MLAShape{Heads: c.NumHeads, Nope: m.QKNopeHeadDim, RopeDim: m.QKRopeHeadDim, VDim: m.VHeadDim, Rank: m.KVLoRARank},
		Eps:      innerEps,
	}
	p.Rope.Interleave = m.RopeInterleave
	p.Rope.AttnFactor = 1
	scale := 1 / math.Sqrt(float64(m.QKNopeHeadDim+m.QKRopeHeadDim))
	r := c.Rope
	// base^(2i/dim) in float32, as torch computes it
	posFreq := make([]float32, dim/2)
	for i := range posFreq {
		posFreq[i] = float32(math.Pow(r.Theta, float64(float32(2*i)/float32(dim))))
	}
	p.Rope.InvFreq = make([]float32, dim/2)
	if r.Type != "yarn" {
		for i, f := range posFreq {
			p.Rope.InvFreq[i] = 1 / f
		}
		p.Scale = float32(scale)
		return p
	}
	factor := r.Factor
	if r.MScaleAllDim != 0 {
		ms := yarnMScale(factor, r.MScaleAllDim)
		scale *= ms * ms
	}
	p.Scale = float32(scale)
	switch {
	case r.AttentionFactor != nil:
		p.Rope.AttnFactor = float32(*r.AttentionFactor)
	case r.MScale != 0 && r.MScaleAllDim != 0:
		p.Rope.AttnFactor = float32(yarnMScale(factor, r.MScale) / yarnMScale(factor, r.MScaleAllDim))
	default:
		p.Rope.AttnFactor = float32(yarnMScale(factor, 1))
	}
	betaFast, betaSlow := r.BetaFast, r.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	// the dimension at which a frequency makes n rotations over the
	// pretrained context
	corr := func(n float64) float64 {
		return float64(dim) * math.Log(float64(r.OriginalMaxPositions)/(n*2*math.Pi)) / (2 * math.Log(r.Theta))
	}
	low, high := corr(betaFast), corr(betaSlow)
	if r.Truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, float64(dim-1))
	if low == high {
		high += 0.001
	}
	lo32, span := float32(low), float32(high-low)
	for i, f := range posFreq {
		ramp := min(max((float32(i)-lo32)/span, 0), 1)
		extra := 1 - ramp
		interp, extrap := 1/(float32(factor)*f), 1/f
		p.Rope.InvFreq[i] = interp*(1-extra) + extrap*extra
	}
	return p
}

// innerEps is the epsilon of q_a_layernorm and kv_a_layernorm.
const innerEps = 1e-6
