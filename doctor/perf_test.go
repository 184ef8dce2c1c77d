//go:build linux && amd64 && cgo

package doctor

import (
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/sysinfo"
)

// TestPerfChecks: without --measure no perf line appears; with it, the read
// bandwidth is measured, the AMX tile rate where the CPU has AMX (and not
// otherwise), and with a model the routed-expert bytes per token of each
// format (worked out here from the config) and the decode rate they allow.
func TestPerfChecks(t *testing.T) {
	model := filepath.Join(fixtures, "qwen3next-b")
	env := &Env{Sys: sysinfo.Detect(), ModelPath: model}
	if rs := runSections(env, "perf"); len(rs) != 0 {
		t.Fatalf("perf results without --measure: %+v", rs)
	}
	env = &Env{Sys: sysinfo.Detect(), ModelPath: model, Measure: true}
	rs := runSections(env, "perf")
	read := find(t, rs, "perf.read")
	gbps, _ := read.Data["read_gbps"].(float64)
	if read.Status != Pass || gbps <= 0 {
		t.Fatalf("perf.read: %s %s %v", read.Status, read.Detail, read.Data)
	}
	hasAMX := false
	for _, r := range rs {
		hasAMX = hasAMX || r.Name == "perf.amx"
	}
	if hasAMX != cpuexperts.DetectFeatures().AMX {
		t.Errorf("perf.amx reported %v on a CPU with AMX %v", hasAMX, cpuexperts.DetectFeatures().AMX)
	}
	c, err := modelconfig.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	dec := find(t, rs, "perf.decode")
	H, I := float64(c.HiddenSize), float64(c.MoEIntermediateSize)
	for meth, perWeight := range map[cpuexperts.Method]func(k float64) float64{
		cpuexperts.AMXBF16: func(float64) float64 { return 2 },
		cpuexperts.AMXINT8: func(k float64) float64 { return 1 + 4/k },
		cpuexperts.AMXINT4: func(k float64) float64 { return 0.5 + 4/k },
	} {
		want := float64(c.NumMoELayers()*c.TopK) * (2*H*I*perWeight(H) + H*I*perWeight(I))
		got, _ := dec.Data[string(meth)].(map[string]any)
		b, _ := got["bytes_per_token"].(float64)
		tps, _ := got["tokens_per_s"].(float64)
		if b != want || tps != gbps*1e9/want {
			t.Errorf("%s: %v bytes per token, %v tok/s; want %v, %v", meth, b, tps, want, gbps*1e9/want)
		}
	}
}
