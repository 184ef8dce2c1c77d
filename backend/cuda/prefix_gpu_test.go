//go:build cgo

package cuda

import (
	"math"
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// TestLinearStateCopySlot checks the prefix cache's state snapshot op on
// the GPU: a sequence (slot 0) prefills 100 tokens (one chunk of 64 and an
// open one of 36); its conv and gated-delta-rule state is copied to slot 2
// (the snapshot), slot 0 goes on for 20 more tokens, and slot 1, restored
// from slot 2, runs the same 20 tokens from position 100: its conv and
// gated-delta-rule outputs must be bit-identical to slot 0's. Bad slots
// are an error. It is skipped without a GPU, like every test here.
func TestLinearStateCopySlot(t *testing.T) {
	p := newOpPair(t)
	for _, d := range []backend.DeltaShape{
		{KHeads: 16, VHeads: 32, KDim: 128, VDim: 128}, // Qwen3-Next-80B / Qwen3.5
		{KHeads: 4, VHeads: 8, KDim: 32, VDim: 16},
	} {
		sh := backend.LinearShape{Layers: 1, ConvKernel: 4, Delta: d}
		st, err := p.g.AllocLinearState(sh, 3)
		if err != nil {
			t.Fatal(err)
		}
		ch, vw := d.ConvChannels(), d.VHeads*d.VDim
		cw, _ := p.weight(t, "conv1d", tensor.F32, p.randF32(ch*sh.ConvKernel, 0.5), ch, 1, sh.ConvKernel)
		run := func(slot, pos, n int, x []float32) []float32 {
			t.Helper()
			if err := p.g.SetStep(testStep([3]int{slot, pos, n})); err != nil {
				t.Fatal(err)
			}
			gx, _ := p.act(t, x, n, ch)
			conv, _ := p.act(t, nil, n, ch)
			p.g.CausalConv1D(conv, gx, cw, st, 0, n)
			gg := make([]float32, n*d.VHeads)
			bb := make([]float32, n*d.VHeads)
			for i := range gg {
				gg[i] = float32(-0.05 - 0.01*float64(i%7))
				bb[i] = float32(0.3 + 0.05*float64(i%5))
			}
			tg, _ := p.act(t, gg, n, d.VHeads)
			tb, _ := p.act(t, bb, n, d.VHeads)
			out, _ := p.act(t, nil, n, vw)
			p.g.GatedDeltaRule(out, conv, tg, tb, st, 0, n)
			if err := p.g.Sync(); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, n*(ch+vw))
			if err := p.g.Read(got[:n*ch], conv, n); err != nil {
				t.Fatal(err)
			}
			if err := p.g.Read(got[n*ch:], out, n); err != nil {
				t.Fatal(err)
			}
			return got
		}
		run(0, 0, 64, p.randF32(64*ch, 1))
		run(0, 64, 36, p.randF32(36*ch, 1))
		if err := st.CopySlot(2, 0); err != nil {
			t.Fatal(err)
		}
		more := p.randF32(20*ch, 1)
		want := run(0, 100, 20, more)
		if err := st.CopySlot(1, 2); err != nil {
			t.Fatal(err)
		}
		got := run(1, 100, 20, more)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("Hv=%d Dk=%d: restored slot output %d is %v, the original's %v", d.VHeads, d.KDim, i, got[i], want[i])
			}
		}
		if err := st.CopySlot(3, 0); err == nil {
			t.Error("CopySlot to slot 3 of 3 succeeded")
		}
		t.Logf("RESULT Hv=%d Dk=%d: a state restored from a CopySlot snapshot continues bit-identically", d.VHeads, d.KDim)
	}
}
