//go:build linux && amd64 && cgo

package hybrid

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/moe/cpuexperts"
)

// dynamicUpdate is --kt-enable-dynamic-expert-update's state: per model
// layer, which expert each of this rank's GPU expert slots holds and the
// slot's device tensors (the ones Load uploaded for the placement: this
// rank's share of the layer's GPU experts).
type dynamicUpdate struct {
	layers                  []*Weights
	rank, size              int
	slots                   [][]int               // per model layer: slot → expert
	slotT                   [][][3]backend.Tensor // per model layer, per slot: gate, up, down
	counts                  []int                 // scratch: picks per expert
	ids                     []int32               // scratch: the step's picks read back
	want                    []bool                // scratch: a layer's new GPU experts (every rank's)
	fetch                   []SlotCopy            // scratch: the copies from host memory
	updates, moved, fetched int                   // layers whose GPU experts changed so far, experts copied (from host)
}

// newDynamicUpdate records this rank's GPU expert slots of layers: the
// experts of its share Load placed, in id order, and their device tensors.
func newDynamicUpdate(lw *layerwise, layers []*Weights) *dynamicUpdate {
	lay := lw.rb.Layout()
	d := &dynamicUpdate{layers: layers, rank: lay.Rank, size: lay.Size, slots: make([][]int, len(layers)), slotT: make([][][3]backend.Tensor, len(layers))}
	for _, w := range layers {
		if w != nil {
			d.counts = make([]int, len(w.Gate)) // every MoE layer has the same experts
			d.want = make([]bool, len(w.Gate))
			break
		}
	}
	for l, w := range layers {
		if !d.active(l) {
			continue
		}
		d.slots[l] = []int{}
		for e, g := range w.OnGPU.Gate {
			if g != nil {
				d.slots[l] = append(d.slots[l], e)
				d.slotT[l] = append(d.slotT[l], [3]backend.Tensor{w.OnGPU.Gate[e], w.OnGPU.Up[e], w.OnGPU.Down[e]})
			}
		}
	}
	d.ids = make([]int32, lw.maxTok*lw.k)
	return d
}

// active reports whether layer l has GPU experts to choose: some of its
// experts, not all, are on the GPU.
func (d *dynamicUpdate) active(l int) bool {
	w := d.layers[l]
	return w != nil && w.NGPU > 0 && w.NGPU < len(w.Gate)
}

// update makes the step's most picked experts of layer l (ids, n rows)
// its GPU experts: every rank computes the same set and refills its slots
// with its RankShare of it, copied device to device from s (which holds
// this rank's share of the layer) or, for an expert s does not hold, from
// host memory; then it rewrites the GPU MoE op's expert table and the CPU
// engine's skip mask in place.
func (d *dynamicUpdate) update(lw *layerwise, l int, s *shadowSet, ids backend.Tensor, n int) error {
	if !d.active(l) {
		return nil
	}
	w := d.layers[l]
	picks := d.ids[:n*lw.k]
	if err := lw.be.ReadI32(picks, ids, n*lw.k); err != nil {
		return fmt.Errorf("layer %d: reading the picks: %w", l, err)
	}
	clear(d.counts)
	CountPicks(d.counts, picks)
	MaskFromSlots(d.want, HottestExperts(d.counts, w.NGPU))
	if slices.Equal(d.want, w.GPU) {
		return nil
	}
	next, copies, err := AssignSlots(d.slots[l], SlotsFromMask(RankShare(d.want, d.rank, d.size)))
	if err != nil {
		return fmt.Errorf("layer %d: %w", l, err)
	}
	d.fetch = d.fetch[:0]
	for _, c := range copies {
		if s.ex.Gate[c.Expert] == nil { // another rank's share of the layer
			d.fetch = append(d.fetch, c)
			continue
		}
		if err := d.copySlot(lw, d.slotT[l][c.Slot], s.dst[c.Expert]); err != nil {
			return fmt.Errorf("layer %d expert %d into slot %d: %w", l, c.Expert, c.Slot, err)
		}
	}
	if err := d.fetchSlots(lw, l); err != nil {
		return err
	}
	d.slots[l] = next
	RebindSlots(w, d.slotT[l], next, d.want, lw.skip != nil)
	if len(copies) > 0 {
		if err := lw.be.RefreshMoETable(&w.OnGPU); err != nil { // waits for the copies
			return fmt.Errorf("layer %d: %w", l, err)
		}
	}
	d.updates++
	d.moved += len(copies)
	d.fetched += len(d.fetch)
	if lw.skip == nil {
		return nil
	}
	return lw.skip(l, w.GPU)
}

// fetchSlots queues on the compute stream the copies d.fetch lists of
// layer l from host memory into their slots, through the staging slots,
// once the next layer's upload has let them go.
func (d *dynamicUpdate) fetchSlots(lw *layerwise, l int) error {
	if len(d.fetch) == 0 {
		return nil
	}
	if err := lw.join(); err != nil {
		return err
	}
	es := make([]int, len(d.fetch))
	into := make(map[int]int, len(d.fetch)) // expert → slot
	for i, c := range d.fetch {
		es[i], into[c.Expert] = c.Expert, c.Slot
	}
	w := d.layers[l]
	dst := func(e int) ([3]devWeight, error) {
		var out [3]devWeight
		for j, t := range d.slotT[l][into[e]] {
			data, scale, ok := lw.be.WeightBuffers(t)
			if !ok {
				return out, fmt.Errorf("layer %d: slot tensor %d is not a tensor of %s", l, j, lw.be.Name())
			}
			hd, hs, err := cuda.WeightBytes([3]backend.Host{w.HostGate[e], w.HostUp[e], w.HostDown[e]}[j])
			if err != nil {
				return out, err
			}
			if data.Size < int64(len(hd)) || scale.Size < int64(len(hs)) {
				return out, fmt.Errorf("layer %d expert %d: slot tensor %d holds %d+%d bytes, the expert %d+%d", l, e, j, data.Size, scale.Size, len(hd), len(hs))
			}
			out[j] = devWeight{data: data, scale: scale, nData: int64(len(hd)), nScale: int64(len(hs))}
		}
		return out, nil
	}
	if _, err := lw.stageCopy(lw.be.Stream(), l, es, dst); err != nil {
		return fmt.Errorf("layer %d: GPU expert slots from host memory: %w", l, err)
	}
	return nil
}

// copySlot queues the device-to-device copies of one expert's matrices
// from the shadow set into a GPU expert slot.
func (d *dynamicUpdate) copySlot(lw *layerwise, slot [3]backend.Tensor, src [3]devWeight) error {
	st := lw.be.Stream()
	for j, t := range slot {
		data, scale, ok := lw.be.WeightBuffers(t)
		if !ok {
			return fmt.Errorf("slot tensor %d is not a tensor of %s", j, lw.be.Name())
		}
		if data.Size < src[j].nData || scale.Size < src[j].nScale {
			return fmt.Errorf("slot tensor %d holds %d+%d bytes, the expert %d+%d", j, data.Size, scale.Size, src[j].nData, src[j].nScale)
		}
		if err := st.CopyDtoD(data, src[j].data, src[j].nData); err != nil {
			return err
		}
		if src[j].nScale > 0 {
			if err := st.CopyDtoD(scale, src[j].scale, src[j].nScale); err != nil {
				return err
			}
		}
	}
	return nil
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
