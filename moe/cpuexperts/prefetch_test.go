//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// TestPrefetch checks what a prefetch task reads and that it changes no
// result: for every method and one or two pools, the bytes it plans are the
// listed experts' own (ExpertBytes; bad ids, repeats and skipped experts
// left out), all of them are read when nothing is queued behind, and a
// forward task queued right behind one (which stops it) gives the same bits
// as without.
func TestPrefetch(t *testing.T) {
	const tokens, topK = 3, 4
	srcs := sourceCache{}
	for _, pools := range []int{1, 2} {
		for _, m := range Methods {
			t.Run(fmt.Sprintf("pools%d/%s", pools, m), func(t *testing.T) {
				spec := small
				spec.Method = m
				e := newEngine(t, spec, pools, 2*pools, tokens, topK, ISAAuto)
				l, err := e.NewLayer(spec, srcs.get(m, spec))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				skip := make([]bool, spec.Experts)
				skip[1] = true
				if err := l.SetSkip(skip); err != nil {
					t.Fatal(err)
				}
				l.Prefetch([]int32{5, -1, 5, int32(spec.Experts + 2), 1, 2, 0, 2})
				if err := e.Sync(); err != nil {
					t.Fatal(err)
				}
				planned, read := e.Prefetched()
				want := l.ExpertBytes(5) + l.ExpertBytes(2) + l.ExpertBytes(0)
				if planned != want || read != want {
					t.Fatalf("experts 5, 2, 0: planned %d bytes, read %d; want %d (ExpertBytes)", planned, read, want)
				}
				l.Prefetch(nil)
				l.Prefetch([]int32{1, -3})
				if p, r := e.Prefetched(); p != planned || r != read {
					t.Fatalf("nothing to read: planned %d, read %d bytes more", p-planned, r-read)
				}

				x, ids, w := RandomBatch(3, tokens, topK, spec.Hidden, spec.Experts)
				base := make([]float32, tokens*spec.Hidden)
				if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: base}); err != nil {
					t.Fatal(err)
				}
				all := make([]int32, spec.Experts)
				for i := range all {
					all[i] = int32(i)
				}
				for rep := 0; rep < 3; rep++ {
					out := make([]float32, tokens*spec.Hidden)
					l.Prefetch(all)
					if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}); err != nil {
						t.Fatal(err)
					}
					for i := range out {
						if math.Float32bits(out[i]) != math.Float32bits(base[i]) {
							t.Fatalf("rep %d: out[%d] = %g after a prefetch, %g without", rep, i, out[i], base[i])
						}
					}
				}
				p2, r2 := e.Prefetched()
				if p2-planned != 3*(l.WeightBytes()-l.ExpertBytes(1)) || r2-read > p2-planned {
					t.Errorf("three prefetches of every expert but the skipped one: planned %d bytes, read %d; want %d planned", p2-planned, r2-read, 3*(l.WeightBytes()-l.ExpertBytes(1)))
				}
			})
		}
	}
}

// TestPrefetchOwnedDecode checks the owned decode path (Config.OwnedDecode,
// alone and with DecodeMissStream): one- and three-token tasks give the
// bits of the default path, before and after prefetches of all their
// experts or some of them (and one they do not use);
// a prefetch with nothing queued behind reads all it plans, and the plan is
// the listed experts' gate and up blocks.
func TestPrefetchOwnedDecode(t *testing.T) {
	const topK = 4
	srcs := sourceCache{}
	for _, m := range []Method{AMXINT4, AMXINT8, BF16, INT4KGroup} {
		spec := small
		spec.Method = m
		src := srcs.get(m, spec)
		newLayer := func(cfg Config) *Layer {
			cfg.Threads, cfg.MaxTokens, cfg.TopK = 3, 3, topK
			cfg.Experts, cfg.Hidden, cfg.Intermediate = spec.Experts, spec.Hidden, spec.Intermediate
			e, err := NewEngine(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
			l, err := e.NewLayer(spec, src)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(l.Close)
			return l
		}
		base := newLayer(Config{})
		l := newLayer(Config{OwnedDecode: true})
		lm := newLayer(Config{OwnedDecode: true, DecodeMissStream: true})
		for _, tokens := range []int{1, 3} {
			x, ids, w := RandomBatch(uint64(tokens), tokens, topK, spec.Hidden, spec.Experts)
			want := make([]float32, tokens*spec.Hidden)
			if err := base.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: want}); err != nil {
				t.Fatal(err)
			}
			// a prediction right for half the experts and wrong for one more
			half := append(slices.Clone(ids[:topK/2]), (ids[0]+1)%int32(spec.Experts))
			for _, c := range []struct {
				l    *Layer
				name string
			}{{l, "owned"}, {lm, "owned, misses streamed"}} {
				for rep := 0; rep < 4; rep++ {
					switch rep {
					case 1: // stopped by the task
						c.l.Prefetch(ids)
					case 2, 3: // read whole
						c.l.Prefetch(map[bool][]int32{true: ids, false: half}[rep == 2])
						if err := c.l.e.Sync(); err != nil {
							t.Fatal(err)
						}
					}
					got := make([]float32, tokens*spec.Hidden)
					if err := c.l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: got}); err != nil {
						t.Fatal(err)
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s, %s, %d tokens, rep %d: out[%d] = %g, the default path gave %g", m, c.name, tokens, rep, i, got[i], want[i])
						}
					}
				}
			}
		}
		p0, r0 := l.e.Prefetched()
		l.Prefetch([]int32{3, 9})
		if err := l.e.Sync(); err != nil {
			t.Fatal(err)
		}
		p1, r1 := l.e.Prefetched()
		// gate and up of two experts
		r, k := l.shape(Gate, 0)
		wb, sb, cb := l.packedSizes(r, k)
		gu := 2 * 2 * (wb + sb + cb)
		if m.InPlace() {
			gu = 2 * 2 * int64(r) * int64(k) * 2
		}
		if d := p1 - p0; d != gu || r1-r0 != d {
			t.Errorf("%s: prefetch of 2 experts planned %d bytes and read %d; want %d (their gate and up)", m, d, r1-r0, gu)
		}
	}
}

// TestSyncAfterLonePrefetch syncs on a prefetch task alone with threads
// that sleep at once (SpinWait < 0), so the caller sleeps before the
// prefetch ends: the prefetch's completion must wake it (a loaded machine
// gets there with the default spin too).
func TestSyncAfterLonePrefetch(t *testing.T) {
	spec := small
	spec.Method = AMXINT8
	e, err := NewEngine(Config{Threads: 2, MaxTokens: 4, TopK: 4, SpinWait: -1, Experts: spec.Experts, Hidden: spec.Hidden,
		Intermediate: spec.Intermediate})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	l, err := e.NewLayer(spec, sourceFor(AMXINT8, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	all := make([]int32, spec.Experts)
	for i := range all {
		all[i] = int32(i)
	}
	for rep := range 20 {
		done := make(chan error, 1)
		go func() {
			l.Prefetch(all)
			done <- e.Sync()
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("rep %d: Sync after a lone prefetch did not return in 10 s", rep)
		}
	}
}
