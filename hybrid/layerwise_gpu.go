//go:build linux && amd64 && cgo

package hybrid

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/internal/settings"
)

// layerwise is the hybrid step's layerwise GPU prefill (see layerwise.go):
// two shadow layer buffers on the GPU (each holds every routed expert of
// one MoE layer; the MoE layers use them in turn, so the next layer's
// upload on a copy stream overlaps this layer's compute), fed from host
// memory through two pinned staging slots of stageTarget bytes or one
// expert, whichever is larger (the host fills one with a group of experts,
// on several goroutines, while the other's copy to the GPU runs; the next
// layer's upload as a whole runs on its own goroutine while this layer's
// MoE is queued); with dynamic expert update, the per-layer GPU expert
// slots it refills. With tensor parallelism each rank holds, uploads and
// computes only its share of a layer's experts (mine: RankShare over every
// expert), and the all-reduce after the MoE layer sums the shares; rank
// 0's is part of its hybrid step (gpuLink.lw), another rank's stands
// alone (Experts.lw).
type layerwise struct {
	be        *cuda.Backend
	rb        *runbase.Base
	maxTok, k int   // the step's rows at most, the routed experts per row
	mine      []int // the experts this rank uploads and computes, in id order
	// skip sets the CPU expert engine's skip mask of a layer after a
	// dynamic update (rank 0 of the hybrid step); nil: no engine here
	skip      func(l int, gpu []bool) error
	threshold int
	layers    []*Weights
	order     []int        // per model layer: its index among the MoE layers, −1 for a dense one
	next      []int        // per model layer: the next MoE layer, −1 for none
	sets      []*shadowSet // 2 (the default), or 1 with settings.LayerwiseBuffers=1 (no overlap)
	cs        *cuda.Stream // the uploads' stream
	stage     [2]*cuda.HostBuffer
	stageEv   [2]*cuda.Event
	stageUsed [2]bool
	stageNext int        // the slot the next group of experts fills
	parts     []copyPart // scratch: one group's host copies
	// pending is the next MoE layer's upload running on its own goroutine
	// while this layer's MoE is queued (nil: none); join waits for it.
	// Only that goroutine touches the upload state (the staging slots,
	// the other set, the upload counters) until then.
	pending chan error
	logged  []bool // per model layer: its load time was logged
	stats   LayerwiseStats
	dyn     *dynamicUpdate // nil unless --kt-enable-dynamic-expert-update
}

// shadowSet is one shadow layer buffer: E experts' device tensors at fixed
// addresses, refilled per layer.
type shadowSet struct {
	ex    backend.Experts
	dst   [][3]devWeight // per expert: gate, up, down
	layer int            // model layer whose weights it holds; −1 none
	ready *cuda.Event    // recorded on the copy stream after the upload
	free  *cuda.Event    // recorded on the compute stream after its last read
	used  bool           // free was recorded
}

// devWeight is the device memory of one expert matrix and the number of
// bytes its host form fills (data; FP8 scales widened to float32).
type devWeight struct {
	data, scale   cuda.Buffer
	nData, nScale int64
}

// stageTarget is the size of a pinned staging slot, unless one expert is
// larger: a group of experts fills it in one parallel copy, so the host copy
// runs on every copy goroutine (one expert's matrices are a few MiB) and
// the wait for the slot's previous transfer comes once per group.
const stageTarget = 64 << 20

// newLayerwise sets up layerwise prefill over layers (nil for a dense
// one; top-k k) on rb's GPU backend for threshold t, with dynamic expert
// update when dynamic; skip sets the CPU expert engine's skip mask of a
// layer (nil on a rank without the engine).
func newLayerwise(rb *runbase.Base, layers []*Weights, t int, dynamic bool, method string, k int, skip func(l int, gpu []bool) error) (*layerwise, error) {
	be, ok := rb.BE.(*cuda.Backend)
	if !ok {
		return nil, fmt.Errorf("layerwise prefill (--kt-gpu-prefill-token-threshold %d) needs the CUDA backend; the model runs on %s", t, rb.BE.Name())
	}
	if err := CheckLayerwiseSource(layers, method); err != nil {
		return nil, err
	}
	for _, w := range layers {
		if w != nil && w.LoRA != nil {
			return nil, errors.New("--kt-gpu-prefill-token-threshold cannot be used with KT expert LoRA (the GPU MoE op has no expert LoRA); set it to 0")
		}
	}
	nsets, err := settings.LayerwiseBuffers.Get()
	if err != nil {
		return nil, err
	}
	lw := &layerwise{be: be, rb: rb, maxTok: rb.Opts.MaxBatchTokens, k: k, skip: skip, threshold: t, layers: layers,
		order: make([]int, len(layers)), next: make([]int, len(layers)), logged: make([]bool, len(layers)), sets: make([]*shadowSet, nsets)}
	first, n, prev := -1, 0, -1
	for l, w := range layers {
		lw.order[l], lw.next[l] = -1, -1
		if w == nil {
			continue
		}
		if first < 0 {
			first = l
		}
		if prev >= 0 {
			lw.next[prev] = l
		}
		lw.order[l], prev = n, l
		n++
	}
	if first < 0 {
		return nil, nil
	}
	lay := rb.Layout()
	all := make([]bool, len(layers[first].HostGate))
	for e := range all {
		all[e] = true
	}
	lw.mine = SlotsFromMask(RankShare(all, lay.Rank, lay.Size))
	if err := lw.alloc(layers[first]); err != nil {
		lw.close()
		return nil, fmt.Errorf("layerwise prefill (--kt-gpu-prefill-token-threshold %d): %w", t, err)
	}
	lw.sets[0].layer = first // alloc uploaded its weights (synchronously); it uses set 0
	if err := be.ReserveMoE(lw.maxTok*k, len(layers[first].HostGate), layers[first].Hidden, layers[first].Inter); err != nil {
		lw.close()
		return nil, fmt.Errorf("layerwise prefill (--kt-gpu-prefill-token-threshold %d): %w", t, err)
	}
	if t > lw.maxTok && rb.Root() {
		slog.Warn("layerwise prefill never runs: the threshold is above the largest forward pass (--chunked-prefill-size)",
			"model", rb.Name, "threshold", t, "max_batch_tokens", lw.maxTok)
	}
	if dynamic {
		lw.dyn = newDynamicUpdate(lw, layers)
	}
	return lw, nil
}

// alloc makes the copy stream, the two shadow sets (each from this rank's
// experts of w, the first MoE layer, which it then holds; nil tensors for
// the other ranks') and the staging slots.
func (lw *layerwise) alloc(w *Weights) error {
	be, dev := lw.be, lw.be.Device()
	var err error
	if lw.cs, err = dev.NewStream(); err != nil {
		return err
	}
	var stageBytes int64
	for i := range lw.sets {
		s := &shadowSet{layer: -1, ex: backend.Experts{Hidden: w.Hidden, Inter: w.Inter}}
		lw.sets[i] = s
		if s.ready, err = dev.NewEvent(false); err != nil {
			return err
		}
		if s.free, err = dev.NewEvent(false); err != nil {
			return err
		}
		E := len(w.HostGate)
		s.ex.Gate, s.ex.Up, s.ex.Down = make([]backend.Tensor, E), make([]backend.Tensor, E), make([]backend.Tensor, E)
		s.dst = make([][3]devWeight, E)
		for _, e := range lw.mine {
			var per int64
			for j, h := range [3]backend.Host{w.HostGate[e], w.HostUp[e], w.HostDown[e]} {
				t, err := be.Weight(h)
				if err != nil {
					return fmt.Errorf("shadow layer buffer: %w", err)
				}
				[3][]backend.Tensor{s.ex.Gate, s.ex.Up, s.ex.Down}[j][e] = t
				data, scale, ok := be.WeightBuffers(t)
				if !ok {
					return fmt.Errorf("shadow layer buffer: %s is not a tensor of %s", h.Name, be.Name())
				}
				hd, hs, err := cuda.WeightBytes(h)
				if err != nil {
					return err
				}
				s.dst[e][j] = devWeight{data: data, scale: scale, nData: int64(len(hd)), nScale: int64(len(hs))}
				per += int64(len(hd) + len(hs))
			}
			stageBytes = max(stageBytes, per)
		}
	}
	stageBytes = max(stageBytes, stageTarget)
	for i := range lw.stage {
		if lw.stage[i], err = dev.AllocHost(stageBytes); err != nil {
			return fmt.Errorf("pinned staging of %d bytes: %w", stageBytes, err)
		}
		if lw.stageEv[i], err = dev.NewEvent(false); err != nil {
			return err
		}
	}
	return nil
}

// use reports whether a step of n rows runs its routed experts layer by
// layer on the GPU.
func (lw *layerwise) use(n int) bool {
	return lw != nil && UseLayerwise(lw.threshold, n, lw.rb.DecodeGraphStep())
}

// forward is layer l's routed experts in a layerwise step of n rows: its
// weights in a shadow set (uploaded now unless the previous layer's call
// did), the next MoE layer's upload into the other set started on its own
// goroutine, the GPU MoE op over every pick (of this rank's experts: the
// others' picks are the other ranks'), the dynamic update.
func (lw *layerwise) forward(l int, out, h, wts, ids backend.Tensor, n int) error {
	if err := lw.join(); err != nil { // the previous call's upload of this layer
		return err
	}
	i := lw.order[l] % len(lw.sets)
	s := lw.sets[i]
	if err := lw.upload(l, s); err != nil {
		return err
	}
	// the next layer's upload goes into the other set on its own goroutine
	// while this layer's MoE is queued (the GPU MoE op may wait for the
	// GPU and queue many GEMMs: the host copy runs meanwhile); with one
	// set it waits for this layer's compute, in the next call
	nx := lw.next[l]
	if nx >= 0 && len(lw.sets) > 1 {
		other := lw.sets[1-i]
		ch := make(chan error, 1)
		lw.pending = ch
		go func() { ch <- lw.upload(nx, other) }()
	}
	st := lw.be.Stream()
	if err := st.Wait(s.ready); err != nil {
		return err
	}
	lw.be.MoE(out, h, &s.ex, wts, ids, n)
	lw.stats.Layers++
	if nx < 0 {
		lw.stats.Steps++
	}
	if lw.dyn != nil {
		if err := lw.dyn.update(lw, l, s, ids, n); err != nil {
			return fmt.Errorf("dynamic expert update: %w", err)
		}
	}
	if err := s.free.Record(st); err != nil {
		return err
	}
	s.used = true
	return nil
}

// upload queues layer l's expert weights (this rank's) into s on the
// copy stream, after the last read of s, through the staging slots;
// nothing when s holds them already (weights never change).
func (lw *layerwise) upload(l int, s *shadowSet) error {
	if s.layer == l {
		return nil
	}
	t0 := time.Now()
	s.layer = -1
	if s.used {
		if err := lw.cs.Wait(s.free); err != nil {
			return err
		}
	}
	bytes, err := lw.stageCopy(lw.cs, l, lw.mine, func(e int) ([3]devWeight, error) { return s.dst[e], nil })
	if err != nil {
		return err
	}
	if err := s.ready.Record(lw.cs); err != nil {
		return err
	}
	s.layer = l
	dt := time.Since(t0)
	lw.stats.Uploads++
	lw.stats.UploadBytes += bytes
	lw.stats.UploadTime += dt
	if !lw.logged[l] {
		lw.logged[l] = true
		attrs := []any{"model", lw.rb.Name, "bytes", bytes}
		if lw.rb.Parallel() {
			attrs = append(attrs, "rank", lw.rb.Layout().Rank)
		}
		slog.Info(fmt.Sprintf("layerwise prefill: layer %d prepare weight = %.2f ms", l, float64(dt.Microseconds())/1000), attrs...)
	}
	return nil
}

// stageCopy queues on st the copies of layer l's experts es from host
// memory into the device matrices dst gives for each, through the staging
// slots (each filled with a group of experts on several goroutines while
// the other's copy runs); it returns the bytes copied.
func (lw *layerwise) stageCopy(st *cuda.Stream, l int, es []int, dst func(e int) ([3]devWeight, error)) (int64, error) {
	var bytes int64
	for len(es) > 0 {
		k := lw.stageNext
		lw.stageNext ^= 1
		if lw.stageUsed[k] {
			if err := lw.stageEv[k].Synchronize(); err != nil { // its last copy to the GPU is done
				return bytes, err
			}
		}
		buf := lw.stage[k].Bytes()
		taken, n, err := lw.stageGroup(l, es, dst, int64(len(buf)))
		if err != nil {
			return bytes, err
		}
		parallelCopy(buf, lw.parts)
		for _, p := range lw.parts {
			if err := st.CopyHtoD(p.dst, lw.stage[k], p.off, int64(len(p.src))); err != nil {
				return bytes, err
			}
		}
		if err := lw.stageEv[k].Record(st); err != nil {
			return bytes, err
		}
		lw.stageUsed[k] = true
		bytes += n
		es = es[taken:]
	}
	return bytes, nil
}

// stageGroup lists in lw.parts the host copies of layer l's experts es
// (from the first) that fit a staging slot of slot bytes (at least one
// expert), each at its offset in the slot and bound for its matrix in
// dst(e); it returns the number of experts in the group and its bytes.
func (lw *layerwise) stageGroup(l int, es []int, dst func(e int) ([3]devWeight, error), slot int64) (int, int64, error) {
	w := lw.layers[l]
	lw.parts = lw.parts[:0]
	var off int64
	i := 0
	for ; i < len(es); i++ {
		e := es[i]
		d, err := dst(e)
		if err != nil {
			return 0, 0, err
		}
		var need int64
		for _, m := range d {
			need += m.nData + m.nScale
		}
		if i > 0 && off+need > slot {
			break
		}
		for j, hm := range [3]backend.Host{w.HostGate[e], w.HostUp[e], w.HostDown[e]} {
			data, scale, err := cuda.WeightBytes(hm)
			if err != nil {
				return 0, 0, err
			}
			if int64(len(data)) != d[j].nData || int64(len(scale)) != d[j].nScale {
				return 0, 0, fmt.Errorf("layer %d expert %d: %s has %d+%d bytes, the device matrix %d+%d", l, e, hm.Name, len(data), len(scale), d[j].nData, d[j].nScale)
			}
			for _, p := range []copyPart{{dst: d[j].data, src: data}, {dst: d[j].scale, src: scale}} {
				if len(p.src) > 0 {
					p.off = off
					lw.parts = append(lw.parts, p)
					off += int64(len(p.src))
				}
			}
		}
	}
	return i, off, nil
}

// copyPart is one host copy into a staging slot: src to the slot's bytes
// at off, bound for dst on the GPU.
type copyPart struct {
	dst cuda.Buffer
	off int64
	src []byte
}

// parallelCopy copies every part's src into dst at its off, on up to 8
// goroutines that split the parts' bytes evenly, in pieces of at least
// 1 MiB whatever the part boundaries: one thread copies page-cache bytes
// into pinned memory at ~8 GB/s on the GPU machine, a third of what the
// host-to-device copy behind it moves.
func parallelCopy(dst []byte, parts []copyPart) {
	parallelCopyOn(dst, parts, min(8, runtime.GOMAXPROCS(0)))
}

// parallelCopyOn is parallelCopy on up to maxWorkers goroutines.
func parallelCopyOn(dst []byte, parts []copyPart, maxWorkers int) {
	const piece = 1 << 20
	var total int
	for _, p := range parts {
		total += len(p.src)
	}
	workers := min(maxWorkers, (total+piece-1)/piece)
	if workers <= 1 {
		for _, p := range parts {
			copy(dst[p.off:], p.src)
		}
		return
	}
	per := (total + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < total; lo += per {
		hi := min(lo+per, total)
		wg.Add(1)
		go func() {
			defer wg.Done()
			copyRange(dst, parts, lo, hi)
		}()
	}
	wg.Wait()
}

// copyRange copies bytes [lo, hi) of the parts' concatenated sources.
func copyRange(dst []byte, parts []copyPart, lo, hi int) {
	at := 0 // where the part starts in the concatenation
	for _, p := range parts {
		n := len(p.src)
		if at+n > lo && at < hi {
			a, b := max(lo-at, 0), min(hi-at, n)
			copy(dst[p.off+int64(a):], p.src[a:b])
		}
		at += n
		if at >= hi {
			return
		}
	}
}

// join waits for the upload forward started on its own goroutine, if
// any, and returns its error.
func (lw *layerwise) join() error {
	if lw.pending == nil {
		return nil
	}
	err := <-lw.pending
	lw.pending = nil
	return err
}

// close waits for the uploads and frees what alloc made (the shadow
// tensors belong to the backend, freed with it).
func (lw *layerwise) close() {
	if lw == nil {
		return
	}
	_ = lw.join()
	if lw.cs != nil {
		_ = lw.cs.Synchronize()
	}
	for _, s := range lw.sets {
		if s == nil {
			continue
		}
		for _, ev := range []*cuda.Event{s.ready, s.free} {
			if ev != nil {
				_ = ev.Destroy()
			}
		}
	}
	for i := range lw.stage {
		if lw.stage[i] != nil {
			_ = lw.stage[i].Free()
		}
		if lw.stageEv[i] != nil {
			_ = lw.stageEv[i].Destroy()
		}
	}
	if lw.cs != nil {
		_ = lw.cs.Destroy()
	}
}

// describe says what layerwise prefill does, for Path ("" when off).
func (lw *layerwise) describe() string {
	if lw == nil {
		return ""
	}
	s := fmt.Sprintf("; layerwise prefill: forward passes of ≥ %d tokens run every routed expert on the GPU (%d shadow layer buffer(s), uploads on a copy stream)", lw.threshold, len(lw.sets))
	if E := len(lw.sets[0].dst); len(lw.mine) < E {
		s += fmt.Sprintf(", this rank's share: %d of the %d experts", len(lw.mine), E)
	}
	if lw.dyn != nil {
		s += "; dynamic expert update: after each layerwise layer its GPU expert slots take the batch's most picked experts"
	}
	return s
}

// statsNow reports what layerwise prefill and the dynamic update did so
// far on this rank (zero when off).
func (lw *layerwise) statsNow() LayerwiseStats {
	if lw == nil {
		return LayerwiseStats{}
	}
	_ = lw.join() // a step that failed part-way may have left one running
	st := lw.stats
	if d := lw.dyn; d != nil {
		st.Updates, st.Moved, st.Fetched = d.updates, d.moved, d.fetched
	}
	return st
}

// layerwiseStats reports what layerwise prefill and the dynamic update
// did so far (zero when off).
func (g *gpuLink) layerwiseStats() LayerwiseStats {
	if g == nil {
		return LayerwiseStats{}
	}
	return g.lw.statsNow()
}
