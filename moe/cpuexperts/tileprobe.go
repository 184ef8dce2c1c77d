//go:build linux && amd64 && cgo

package cpuexperts

import (
	"errors"
	"fmt"
)

// TileProbe measures the AMX tile unit's rate on a set of cores, all at
// once, in the loop that bounds every prefill kernel of the engine: the 2×2
// block of four tile products whose four operand tiles are reloaded from L1
// every round (one tile load per product, the fewest that eight tile
// registers allow; kbench.c, kern_amx.c kt_amx_peak_loop). A kernel whose
// operands come from L2 or memory can only be slower. kt bench takes a
// sample next to each prefill measurement, as it does with the read probe,
// so an AMX row's TFLOPS is read against what the tile unit allowed in the
// same minutes: on machines whose cores share tile units (hyperthread
// siblings, virtual CPUs) that ceiling moves with the neighbours' load.
type TileProbe struct {
	cpus    []int
	samples [2][]float64 // [0] bf16, [1] int8 TFLOPS
}

// NewTileProbe makes a probe over cpus (one pinned thread each), refused
// where the CPU has no AMX or the OS does not grant it.
func NewTileProbe(cpus []int) (*TileProbe, error) {
	if len(cpus) == 0 {
		return nil, errors.New("tile probe: no CPUs")
	}
	f := DetectFeatures()
	if !f.AMX {
		return nil, errors.New("tile probe: this CPU has no AMX tiles")
	}
	p := &TileProbe{cpus: append([]int(nil), cpus...)}
	if _, err := p.measure(false); err != nil { // the OS's AMX permission, the threads
		return nil, err
	}
	return p, nil
}

// tileProbeRounds is the number of 2×2 block rounds per sample, in units of
// the kernel benchmark's 100000 (kbench.c KB_PEAK_ROUNDS): about 3 ms per
// core at one core's full rate, 15 ms where four cores share a unit.
const tileProbeRounds = 1

// measure runs the loop once on every core and returns all cores' TFLOPS.
func (p *TileProbe) measure(i8 bool) (float64, error) {
	tf, err := amxKernelBench(kbOf(i8), 32, 64, amxKnobs{variant: -2}, tileProbeRounds, kbOf(i8).pairBytes(64), p.cpus, false)
	if err != nil {
		return 0, fmt.Errorf("tile probe: %w", err)
	}
	return tf, nil
}

// Sample measures once (int8 tile products when i8, else bf16) and keeps
// the sample; it returns the TFLOPS of all the probe's cores together.
func (p *TileProbe) Sample(i8 bool) (float64, error) {
	tf, err := p.measure(i8)
	if err != nil {
		return 0, err
	}
	p.samples[b2n(i8)] = append(p.samples[b2n(i8)], tf)
	return tf, nil
}

// Samples returns the samples of one format taken so far, in order.
func (p *TileProbe) Samples(i8 bool) []float64 { return append([]float64(nil), p.samples[b2n(i8)]...) }

// Median is the median of one format's samples (0 if none).
func (p *TileProbe) Median(i8 bool) float64 { return Median(p.samples[b2n(i8)]) }

// Cores is the number of cores the probe runs on.
func (p *TileProbe) Cores() int { return len(p.cpus) }

// TileFormat reports whether method m's prefill runs on this engine's real
// AMX tiles, and whether on int8 tile products (AMXINT8, AMXINT4) rather
// than bf16 ones (BF16, AMXBF16, FP8): the format a TileProbe sample for
// m's prefill rows takes.
func (e *Engine) TileFormat(m Method) (i8, ok bool) { return tileFormat(m, e.bits) }

// b2n indexes a pair of per-format values: 1 for int8, 0 for bf16.
func b2n(b bool) int {
	if b {
		return 1
	}
	return 0
}
