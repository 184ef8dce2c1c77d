//go:build linux && amd64 && cgo

package qwen3next

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/hybrid"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/moe/placement"
)

// TestHybridTensorParallelSameDevice runs the hybrid step over 2 ranks
// that share one GPU (cuda.SameDeviceGroup through arch.LoadRanks): rank 0
// runs the CPU expert engine on the CPU experts, the GPU experts are split
// over the ranks (each computes its share on its backend), and the ranks'
// outputs are summed with the shared expert's shards; with expert deferral
// (rank 0's engine defers, the GPU experts never); with layerwise prefill
// (threshold 16: the 24-token prompts run every routed expert on the GPU,
// each rank uploading and computing its half of each layer's experts,
// rank 0's engine idle; the decode steps run the hybrid step); and with
// the dynamic update after each layerwise prefill. Two prompts run in
// turn, each followed by 6 greedy steps; every logprob must be within
// modeltest.TPTol of the same hybrid model on one rank, with the same
// greedy tokens. With the dynamic update, every rank must end with the
// GPU experts the one-rank model ends with, each holding its RankShare of
// them in its slots, and each rank's counts of moved experts, and of those
// fetched from host memory (not in its layerwise share), must be what the
// recorded picks imply. It skips without a GPU.
func TestHybridTensorParallelSameDevice(t *testing.T) {
	gpu := openTestGPU(t)
	dir, shape := writeEngineSynth(t, 5)
	prompts := make([][]int32, 2)
	for p := range prompts {
		prompts[p] = make([]int32, 24)
		for i := range prompts[p] {
			prompts[p][i] = int32((i*41 + p*97 + 3) % shape.Vocab)
		}
	}
	three := placement.Request{PerLayer: 3} // shares of 2 and 1 per layer
	for _, c := range []struct {
		name string
		o    arch.Options // the features of both runs
		want string       // in rank 0's expert path
	}{
		{"3 per layer", arch.Options{GPUExperts: three}, "GPU experts per MoE layer"},
		// a layer wholly on the GPUs, one split, two on the CPU
		{"front-loading", arch.Options{GPUExperts: placement.Request{Ratio: 10.0 / 32, RatioSet: true, Strategy: placement.FrontLoading}}, "GPU experts per MoE layer"},
		{"deferral 1", arch.Options{ExpertDeferral: 1}, "deferral"},
		{"3 per layer, deferral 2", arch.Options{GPUExperts: three, ExpertDeferral: 2}, "deferral"},
		{"layerwise 16", arch.Options{GPUPrefillThreshold: 16}, "this rank's share: 4 of the 8 experts"},
		{"layerwise 16, 3 per layer, deferral 1", arch.Options{GPUExperts: three, GPUPrefillThreshold: 16, ExpertDeferral: 1}, "this rank's share: 4 of the 8 experts"},
		{"dynamic update, 3 per layer", arch.Options{GPUExperts: three, GPUPrefillThreshold: 16, DynamicExpertUpdate: true}, "dynamic expert update"},
		{"dynamic update, 5 per layer", arch.Options{GPUExperts: placement.Request{PerLayer: 5}, GPUPrefillThreshold: 16, DynamicExpertUpdate: true}, "dynamic expert update"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			o.MaxSeqs, o.MaxTotalTokens, o.MaxBatchTokens, o.Threads, o.Experts = 1, 64, 64, 2, "BF16"
			o1 := o
			o1.Backend = gpu
			one, err := Load(dir, o1)
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			bes := make([]*cuda.Backend, 2)
			abes := make([]backend.Backend, 2)
			for r := range bes {
				if bes[r], err = cuda.NewBackendOn(gpu.Device()); err != nil {
					t.Fatal(err)
				}
				abes[r] = bes[r]
			}
			g, err := cuda.NewSameDeviceGroup(bes)
			if err != nil {
				t.Fatal(err)
			}
			rec := &passPicks{E: shape.Experts}
			o.ExpertRecorder = rec // rank 0 records the picks every rank routes
			par, err := arch.LoadRanks(dir, o, abes, g)
			if err != nil {
				t.Fatal(err)
			}
			defer par.Close()
			path := arch.ExpertPath(par)
			t.Logf("one rank: %s; rank 0 of 2: %s", one.ExpertPath(), path)
			if !strings.Contains(path, c.want) {
				t.Fatalf("rank 0's experts run on %q, want %q", path, c.want)
			}
			ranks := tpRanks(t, par, 2)
			loaded := make([][]bool, len(ranks[0].moe)) // the GPU experts at load, per layer
			for l, w := range ranks[0].moe {
				if w != nil {
					loaded[l] = slices.Clone(w.GPU)
				}
			}
			worst := 0.0
			tr := &tpRunner{Runner: par}
			for p, prompt := range prompts {
				lw := o.GPUPrefillThreshold > 0 && len(prompt) >= o.GPUPrefillThreshold
				got := greedyRecorded(t, tr, prompt, 6, func(on bool) { rec.pass(on && lw) })
				want := greedyLogprobs(t, testRunner{one}, prompt, 6)
				for i := range want {
					if a, b := modeltest.Argmax(got[i]), modeltest.Argmax(want[i]); a != b {
						t.Fatalf("prompt %d row %d: greedy token %d over 2 ranks, %d on one", p, i, a, b)
					}
					for v := range want[i] {
						worst = math.Max(worst, math.Abs(got[i][v]-want[i][v]))
					}
				}
				tr.Free(0)
				one.Free(0)
			}
			t.Logf("worst logprob difference to one rank %.3g", worst)
			if worst > modeltest.TPTol {
				t.Errorf("logprobs differ by %g over 2 ranks", worst)
			}
			if o.GPUPrefillThreshold > 0 {
				checkLayerwiseRanks(t, one, ranks, loaded, rec, o.DynamicExpertUpdate)
			}
		})
	}
}

// checkLayerwiseRanks checks the ranks' layerwise prefill against the
// recorded layerwise passes (rec): every rank ran each of them on every
// MoE layer; with the dynamic update, every rank's GPU experts are the
// one-rank model's, its slots hold its RankShare of them, and its counts
// of updated layers, moved experts and experts fetched from host memory
// (those of its new share it did not upload: outside its RankShare of
// every expert) are what replaying the updates on the picks from the
// load-time GPU experts (loaded, per layer) gives.
func checkLayerwiseRanks(t *testing.T, one *Runner, ranks []*Runner, loaded [][]bool, rec *passPicks, dynamic bool) {
	t.Helper()
	size := len(ranks)
	type want struct{ updates, moved, fetched int }
	wants := make([]want, size)
	for r, rr := range ranks {
		st := rr.routed.LayerwiseStats()
		t.Logf("rank %d: %+v", r, st)
		if moe := countMoE(rr); st.Steps != len(rec.passes) || st.Layers != len(rec.passes)*moe {
			t.Errorf("rank %d: %d layerwise passes over %d MoE layers, want %d over %d", r, st.Steps, st.Layers, len(rec.passes), len(rec.passes)*moe)
		}
	}
	if !dynamic {
		return
	}
	for l, w1 := range one.moe {
		if w1 == nil || ranks[0].moe[l] == nil {
			continue
		}
		E := len(w1.GPU)
		all := make([]bool, E)
		for e := range all {
			all[e] = true
		}
		// replay the updates from the load-time placement, as every rank
		// makes them
		mask := slices.Clone(loaded[l])
		n := 0
		for _, on := range mask {
			if on {
				n++
			}
		}
		if n == 0 || n == E {
			continue // no slot, or every expert has one: nothing to choose
		}
		slots := make([][]int, size)
		for r := range slots {
			slots[r] = hybrid.SlotsFromMask(hybrid.RankShare(mask, r, size))
		}
		for _, counts := range rec.passes {
			next := make([]bool, E)
			hybrid.MaskFromSlots(next, hybrid.HottestExperts(counts[l], n))
			if slices.Equal(next, mask) {
				continue
			}
			for r := range size {
				ns, copies, err := hybrid.AssignSlots(slots[r], hybrid.SlotsFromMask(hybrid.RankShare(next, r, size)))
				if err != nil {
					t.Fatal(err)
				}
				mine := hybrid.RankShare(all, r, size)
				for _, cp := range copies {
					if !mine[cp.Expert] {
						wants[r].fetched++
					}
				}
				wants[r].updates++
				wants[r].moved += len(copies)
				slots[r] = ns
			}
			mask = next
		}
		if !slices.Equal(w1.GPU, mask) {
			t.Errorf("layer %d: GPU experts on one rank %v, the replay of the picks %v", l, w1.GPU, mask)
		}
		for r, rr := range ranks {
			w := rr.moe[l]
			if !slices.Equal(w.GPU, mask) {
				t.Errorf("rank %d layer %d: GPU experts %v, want %v", r, l, w.GPU, mask)
			}
			share := hybrid.RankShare(mask, r, size)
			for e := range E {
				if (w.OnGPU.Gate[e] != nil) != share[e] {
					t.Errorf("rank %d layer %d expert %d: in this rank's slots %v, in its share %v", r, l, e, w.OnGPU.Gate[e] != nil, share[e])
				}
			}
		}
	}
	for r, rr := range ranks {
		st := rr.routed.LayerwiseStats()
		if got := (want{st.Updates, st.Moved, st.Fetched}); got != wants[r] {
			t.Errorf("rank %d: %d updates, %d experts moved, %d from host memory; the picks give %d, %d, %d",
				r, got.updates, got.moved, got.fetched, wants[r].updates, wants[r].moved, wants[r].fetched)
		}
	}
	total := 0
	for _, w := range wants {
		total += w.moved
	}
	if total == 0 {
		t.Errorf("the dynamic update moved no expert on any rank (change the prompts)")
	}
}

// greedyRecorded is greedyLogprobs with record(true) called before the
// prompt's forward pass and record(false) after it.
func greedyRecorded(t *testing.T, tr modeltest.Runner, prompt []int32, steps int, record func(on bool)) [][]float64 {
	t.Helper()
	record(true)
	rows := modeltest.Forward(t, tr, 0, prompt, true)
	record(false)
	lps := modeltest.LogSoftmaxRows(rows)
	for range steps {
		next := modeltest.Argmax(lps[len(lps)-1])
		row := modeltest.Forward(t, tr, 0, []int32{next}, false)
		lps = append(lps, modeltest.LogSoftmax(row[0]))
	}
	return lps
}

// countMoE counts r's MoE layers.
func countMoE(r *Runner) int {
	n := 0
	for _, w := range r.moe {
		if w != nil {
			n++
		}
	}
	return n
}

// tpRanks returns the ranks' runners of the tensor-parallel model par.
func tpRanks(t *testing.T, par model.Runner, size int) []*Runner {
	t.Helper()
	rk, ok := par.(interface{ Rank(int) model.Runner })
	if !ok {
		t.Fatalf("%T does not give its ranks", par)
	}
	out := make([]*Runner, size)
	for r := range out {
		if out[r], ok = rk.Rank(r).(*Runner); !ok {
			t.Fatalf("rank %d is a %T", r, rk.Rank(r))
		}
	}
	return out
}

// passPicks records, per layerwise pass, each layer's picks per expert
// (arch.ExpertRecorder; recording only during such a pass's prefill).
type passPicks struct {
	E      int
	on     bool
	passes []map[int][]int // per layerwise pass: layer → picks per expert
}

// pass starts a layerwise pass (on) or stops recording.
func (p *passPicks) pass(on bool) {
	p.on = on
	if on {
		p.passes = append(p.passes, map[int][]int{})
	}
}

func (p *passPicks) Recording() bool { return p.on }

func (p *passPicks) Add(layer int, ids []int32) {
	cur := p.passes[len(p.passes)-1]
	if cur[layer] == nil {
		cur[layer] = make([]int, p.E)
	}
	hybrid.CountPicks(cur[layer], ids)
}

// tpRunner is a tensor-parallel model.Runner that counts the tokens of
// its slot 0 (modeltest.Runner; a tensor-parallel runner hides its ranks'
// pools).
type tpRunner struct {
	model.Runner
	n int
}

func (r *tpRunner) SlotLen(int) int { return r.n }

func (r *tpRunner) Forward(b *model.Batch, out *model.Logits) error {
	if err := r.Runner.Forward(b, out); err != nil {
		return err
	}
	for _, c := range b.Chunks {
		r.n += len(c.Tokens)
	}
	return nil
}

func (r *tpRunner) Free(slot int) {
	r.Runner.Free(slot)
	r.n = 0
}
