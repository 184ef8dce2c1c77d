//go:build linux && amd64 && cgo

package hybrid

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/moe/cpuexperts"
)

// dynamicUpdate is --kt-enable-dynamic-expert-update's state: per model
// layer, which expert each GPU expert slot holds and the slot's device
// tensors (the ones Load uploaded for the placement).
type dynamicUpdate struct {
	layers         []*Weights
	slots          [][]int               // per model layer: slot → expert
	slotT          [][][3]backend.Tensor // per model layer, per slot: gate, up, down
	counts         []int                 // scratch: picks per expert
	ids            []int32               // scratch: the step's picks read back
	updates, moved int                   // layers whose slots changed so far
}

// newDynamicUpdate records the GPU expert slots of layers: the experts
// Load placed, in id order, and their device tensors.
func newDynamicUpdate(g *gpuLink, layers []*Weights) *dynamicUpdate {
	d := &dynamicUpdate{layers: layers, slots: make([][]int, len(layers)), slotT: make([][][3]backend.Tensor, len(layers))}
	for _, w := range layers {
		if w != nil {
			d.counts = make([]int, len(w.Gate)) // every MoE layer has the same experts
			break
		}
	}
	for l, w := range layers {
		if w == nil || w.NGPU == 0 || w.NGPU == len(w.Gate) {
			continue // nothing to choose: no slot, or every expert has one
		}
		d.slots[l] = SlotsFromMask(w.GPU)
		for _, e := range d.slots[l] {
			d.slotT[l] = append(d.slotT[l], [3]backend.Tensor{w.OnGPU.Gate[e], w.OnGPU.Up[e], w.OnGPU.Down[e]})
		}
	}
	d.ids = make([]int32, g.maxTok*g.k)
	return d
}

// update refills layer l's GPU expert slots with the step's most picked
// experts (ids, n rows), copied device to device from s (which holds the
// layer), and rewrites the GPU MoE op's expert table and the CPU engine's
// skip mask in place.
func (d *dynamicUpdate) update(g *gpuLink, l int, s *shadowSet, ids backend.Tensor, n int) error {
	slots := d.slots[l]
	if slots == nil {
		return nil
	}
	picks := d.ids[:n*g.k]
	if err := g.be.ReadI32(picks, ids, n*g.k); err != nil {
		return fmt.Errorf("layer %d: reading the picks: %w", l, err)
	}
	clear(d.counts)
	CountPicks(d.counts, picks)
	next, copies, err := AssignSlots(slots, HottestExperts(d.counts, len(slots)))
	if err != nil {
		return fmt.Errorf("layer %d: %w", l, err)
	}
	if len(copies) == 0 {
		return nil
	}
	for _, c := range copies {
		if err := d.copySlot(g, d.slotT[l][c.Slot], s.dst[c.Expert]); err != nil {
			return fmt.Errorf("layer %d expert %d into slot %d: %w", l, c.Expert, c.Slot, err)
		}
	}
	d.slots[l] = next
	w := d.rebind(l, next)
	if err := g.be.RefreshMoETable(&w.OnGPU); err != nil { // waits for the copies
		return fmt.Errorf("layer %d: %w", l, err)
	}
	d.updates++
	d.moved += len(copies)
	return setSkip(g.x.layers[l], w.GPU)
}

// copySlot queues the device-to-device copies of one expert's matrices
// from the shadow set into a GPU expert slot.
func (d *dynamicUpdate) copySlot(g *gpuLink, slot [3]backend.Tensor, src [3]devWeight) error {
	for j, t := range slot {
		data, scale, ok := g.be.WeightBuffers(t)
		if !ok {
			return fmt.Errorf("slot tensor %d is not a tensor of %s", j, g.be.Name())
		}
		if data.Size < src[j].nData || scale.Size < src[j].nScale {
			return fmt.Errorf("slot tensor %d holds %d+%d bytes, the expert %d+%d", j, data.Size, scale.Size, src[j].nData, src[j].nScale)
		}
		if err := g.s.CopyDtoD(data, src[j].data, src[j].nData); err != nil {
			return err
		}
		if src[j].nScale > 0 {
			if err := g.s.CopyDtoD(scale, src[j].scale, src[j].nScale); err != nil {
				return err
			}
		}
	}
	return nil
}

// rebind points layer l's GPU experts at the slots' new experts
// (RebindSlots); it returns the layer's Weights.
func (d *dynamicUpdate) rebind(l int, slots []int) *Weights {
	w := d.layers[l]
	RebindSlots(w, d.slotT[l], slots)
	return w
}

// setSkip gives the CPU engine's layer its new skip mask (the experts on
// the GPU), written in place.
func setSkip(L *cpuexperts.Layer, gpu []bool) error {
	if err := L.SetSkip(gpu); err != nil {
		return fmt.Errorf("CPU expert skip mask: %w", err)
	}
	return nil
}

// placement says how many routed experts of each MoE layer are on the GPU,
// for Path (the startup log).
func (g *gpuLink) placement() string {
	var per []string
	total, moe := 0, 0
	for l := range g.allGPU {
		if g.x.layers[l] == nil {
			continue
		}
		moe++
		total += g.nGPU[l]
		per = append(per, strconv.Itoa(g.nGPU[l]))
	}
	if total == 0 {
		return "no routed expert on the GPU"
	}
	return fmt.Sprintf("GPU experts per MoE layer %s (%d of %d)", strings.Join(per, ","), total, moe*g.experts)
}
