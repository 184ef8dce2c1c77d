package main

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/moe/placement"
	"github.com/ktserve/kt/serveconfig"
)

// TestGPUExpertRequest: serve's --kt-num-gpu-experts, --kt-gpu-experts-ratio,
// --kt-expert-placement-strategy and --init-expert-location reach the
// models options as the placement request.
func TestGPUExpertRequest(t *testing.T) {
	for _, c := range []struct {
		args []string
		want placement.Request
	}{
		{nil, placement.Request{PerLayer: -1, Strategy: placement.Uniform}},
		{[]string{"--kt-num-gpu-experts", "4"}, placement.Request{PerLayer: 4, Strategy: placement.Uniform}},
		{[]string{"--kt-gpu-experts-ratio", "0.25", "--kt-expert-placement-strategy", "random"},
			placement.Request{PerLayer: -1, Ratio: 0.25, RatioSet: true, Strategy: placement.Random}},
		{[]string{"--kt-num-gpu-experts", "2", "--kt-expert-placement-strategy", "frequency", "--init-expert-location", "s.pt"},
			placement.Request{PerLayer: 2, Strategy: placement.Frequency, StatsPath: "s.pt"}},
	} {
		cfg, err := serveconfig.Parse(append([]string{"--model-path", "m", "--kt-weight-path", "m", "--kt-method", "BF16"}, c.args...))
		if err != nil {
			t.Fatal(err)
		}
		var o arch.Options
		if err := ktExpertOptions(cfg, &o, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			t.Fatal(err)
		}
		if o.GPUExperts != c.want {
			t.Errorf("%v: request %+v, want %+v", c.args, o.GPUExperts, c.want)
		}
	}
}

// TestGenerateGPUExpertsNeedHybrid: kt generate refuses GPU experts where
// no hybrid step runs.
func TestGenerateGPUExpertsNeedHybrid(t *testing.T) {
	for _, args := range [][]string{
		{"--device", "cpu", "--kt-method", "BF16", "--kt-num-gpu-experts", "2"},
		{"--device", "cuda", "--experts", "backend", "--kt-gpu-experts-ratio", "0.5"},
	} {
		_, _, err := runKT(t, append([]string{"generate", "--model-path", t.TempDir(), "--input-ids", "1,2"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "hybrid step") {
			t.Errorf("%v: error %v, want the hybrid-step refusal", args, err)
		}
	}
}
