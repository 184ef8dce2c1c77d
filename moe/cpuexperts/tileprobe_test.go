//go:build linux && amd64 && cgo

package cpuexperts

import (
	"slices"
	"strings"
	"testing"
)

// TestTileFormat: which methods' prefill rows a tile probe sample is taken
// for, and in which format, by the ISA bits: real AMX only, never for
// INT4_KGROUP; int8 for the quantized AMX methods, bf16 for the rest. It
// agrees with describe, which names the same choice.
func TestTileFormat(t *testing.T) {
	amx := isaAVX512 | isaVNNI | isaBF16 | isaAMX
	for _, tc := range []struct {
		m      Method
		bits   int
		i8, ok bool
	}{
		{AMXBF16, amx, false, true},
		{BF16, amx, false, true},
		{FP8, amx, false, true},
		{AMXINT8, amx, true, true},
		{AMXINT4, amx, true, true},
		{INT4KGroup, amx, true, true},
		{AMXBF16, amx | isaAMXEmu, false, false},
		{AMXINT8, isaAVX512 | isaVNNI | isaBF16, false, false},
		{AMXBF16, isaAVX2, false, false},
	} {
		i8, ok := tileFormat(tc.m, tc.bits)
		if i8 != tc.i8 || ok != tc.ok {
			t.Errorf("%s bits %#x: i8 %v ok %v, want %v %v", tc.m, tc.bits, i8, ok, tc.i8, tc.ok)
		}
		if real := strings.HasSuffix(describe(tc.m, tc.bits), ", amx prefill"); real != ok {
			t.Errorf("%s bits %#x: describe %q, tileFormat ok %v", tc.m, tc.bits, describe(tc.m, tc.bits), ok)
		}
	}
}

// TestTileProbe: without AMX the probe is refused with the reason; with it
// every sample is a positive rate, kept per format.
func TestTileProbe(t *testing.T) {
	if _, err := NewTileProbe(nil); err == nil {
		t.Error("a probe over no CPUs was made")
	}
	p, err := NewTileProbe([]int{0})
	if !DetectFeatures().AMX {
		if err == nil || !strings.Contains(err.Error(), "no AMX") {
			t.Fatalf("no AMX: err %v, want a refusal that says so", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, i8 := range []bool{false, true, false} {
		if tf, err := p.Sample(i8); err != nil || tf <= 0 {
			t.Fatalf("i8=%v: %v TFLOPS, %v", i8, tf, err)
		}
	}
	if len(p.Samples(false)) != 2 || len(p.Samples(true)) != 1 || p.Median(true) != p.Samples(true)[0] || p.Cores() != 1 {
		t.Errorf("samples bf16 %v int8 %v, cores %d", p.Samples(false), p.Samples(true), p.Cores())
	}
}

// TestWorkerCPUs: the CPUs WorkerCPUs names are those an engine of as many
// workers pins them to.
func TestWorkerCPUs(t *testing.T) {
	for _, n := range []int{0, 1, PhysicalCores(), 2 * PhysicalCores()} {
		e, err := NewEngine(Config{MaxTokens: 1, TopK: 1, Experts: 1, Hidden: 128, Intermediate: 128, Threads: n})
		if err != nil {
			t.Fatal(err)
		}
		want := e.CPUs()
		e.Close()
		if got := WorkerCPUs(n); !slices.Equal(got, want) {
			t.Errorf("%d threads: WorkerCPUs %v, the engine's %v", n, got, want)
		}
	}
}
