//go:build cgo

package cuda

import (
	"testing"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/tensor"
)

// TestMoETableRefresh checks the hybrid step's dynamic expert update at
// the op level: a layer whose GPU share is experts 0 and 1 (two slots;
// ids of the others masked), then expert 5's weights copied device to
// device into slot 0 (WeightBuffers) and the table rewritten in place
// (RefreshMoETable): the MoE op must match the CPU op over the ids the
// slots hold, before and after, without moving a buffer (the graph epoch
// stays, with the scratch reserved by ReserveMoE). It skips without a GPU.
func TestMoETableRefresh(t *testing.T) {
	p := newOpPair(t)
	const E, H, I, k, maxT = 8, 256, 128, 2, 64
	p.setStep(t, stepMixed)
	n := len(stepMixed.Tokens)
	if err := p.g.ReserveMoE(maxT*k, E, H, I); err != nil {
		t.Fatal(err)
	}
	all := [2]backend.Experts{{Hidden: H, Inter: I}, {Hidden: H, Inter: I}} // GPU, CPU: every expert
	for e := 0; e < E; e++ {
		for j := range 3 {
			shape := []int{I, H}
			if j == 2 {
				shape = []int{H, I}
			}
			g, c := p.weight(t, "expert", tensor.BF16, p.randF32(H*I, 0.05), shape...)
			for i, x := range []backend.Tensor{g, c} {
				dst := []*[]backend.Tensor{&all[i].Gate, &all[i].Up, &all[i].Down}[j]
				*dst = append(*dst, x)
			}
		}
	}
	// the slots: copies of experts 0 and 1 (as Load uploads GPU experts)
	part := backend.Experts{Hidden: H, Inter: I, Gate: make([]backend.Tensor, E), Up: make([]backend.Tensor, E), Down: make([]backend.Tensor, E)}
	slots := make([][3]backend.Tensor, 2)
	for s := range slots {
		for j, src := range []backend.Tensor{all[0].Gate[s], all[0].Up[s], all[0].Down[s]} {
			dst, err := p.g.Alloc(tensor.BF16, src.Shape()...)
			if err != nil {
				t.Fatal(err)
			}
			copyWeight(t, p.g, dst, src)
			slots[s][j] = dst
		}
		part.Gate[s], part.Up[s], part.Down[s] = slots[s][0], slots[s][1], slots[s][2]
	}
	gx, cx := p.act(t, p.randF32(maxT*H, 1), maxT, H)
	gl, cl := p.act(t, p.randF32(maxT*E, 1), maxT, E)
	gw, cw := p.act(t, nil, maxT, k)
	gi, ci := p.ids(t, maxT, k)
	p.g.RouterTopK(gw, gi, gl, k, true, n)
	p.c.RouterTopK(cw, ci, cl, k, true, n)
	picks := append([]int32(nil), ci.(*cpu.Tensor).I32()[:n*k]...)
	// check runs the GPU op over part and the CPU op over every expert
	// with the ids outside on masked
	check := func(name string, on ...int32) {
		t.Helper()
		cids := ci.(*cpu.Tensor).I32()
		for i, id := range picks {
			cids[i] = -1
			for _, o := range on {
				if id == o {
					cids[i] = id
				}
			}
		}
		gout, cout := p.act(t, nil, maxT, H)
		p.g.MoE(gout, gx, &part, gw, gi, n)
		p.c.MoE(cout, cx, &all[1], cw, ci, n)
		p.compare(t, name, gout, cout, n, 1e-5)
	}
	check("slots hold experts 0, 1", 0, 1)
	epoch := p.g.GraphEpoch()
	copyWeight(t, p.g, slots[0][0], all[0].Gate[5])
	copyWeight(t, p.g, slots[0][1], all[0].Up[5])
	copyWeight(t, p.g, slots[0][2], all[0].Down[5])
	part.Gate[0], part.Up[0], part.Down[0] = nil, nil, nil
	part.Gate[5], part.Up[5], part.Down[5] = slots[0][0], slots[0][1], slots[0][2]
	if err := p.g.RefreshMoETable(&part); err != nil {
		t.Fatal(err)
	}
	check("slots hold experts 5, 1", 5, 1)
	if p.g.GraphEpoch() != epoch {
		t.Errorf("graph epoch %d → %d: a buffer moved", epoch, p.g.GraphEpoch())
	}
	// a table whose experts change form is refused
	part.Gate[6], part.Up[6], part.Down[6] = all[0].Gate[6], all[0].Up[6], all[0].Down[6]
	part.Gate[1], part.Up[1], part.Down[1] = nil, nil, nil
	part.Gate[2], part.Up[2], part.Down[2] = nil, nil, nil
	if err := p.g.RefreshMoETable(&part); err != nil {
		t.Errorf("same form (2 of 8 present, partial): %v", err)
	}
	for e := range E {
		part.Gate[e], part.Up[e], part.Down[e] = all[0].Gate[e], all[0].Up[e], all[0].Down[e]
	}
	if err := p.g.RefreshMoETable(&part); err == nil {
		t.Errorf("every expert present (no longer partial): refresh accepted")
	}
}

// copyWeight copies weight src into dst, device to device, on b's stream.
func copyWeight(t *testing.T, b *Backend, dst, src backend.Tensor) {
	t.Helper()
	dd, _, ok1 := b.WeightBuffers(dst)
	sd, _, ok2 := b.WeightBuffers(src)
	if !ok1 || !ok2 {
		t.Fatal("WeightBuffers: not tensors of the backend")
	}
	n := int64(src.Shape()[0]*src.Shape()[1]) * 2
	if err := b.Stream().CopyDtoD(dd, sd, n); err != nil {
		t.Fatal(err)
	}
}

func TestWeightBytes(t *testing.T) {
	h := backend.Host{Name: "w", DType: tensor.BF16, Shape: []int{2, 3}, Data: make([]byte, 12)}
	data, scale, err := WeightBytes(h)
	if err != nil || len(data) != 12 || scale != nil {
		t.Errorf("bf16: %d bytes, scale %v, %v", len(data), scale, err)
	}
	h.DType, h.Data = tensor.I8, make([]byte, 6)
	if _, _, err := WeightBytes(h); err == nil {
		t.Errorf("i8 accepted")
	}
}
