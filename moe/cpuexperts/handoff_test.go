//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"testing"
	"time"
	"unsafe"
)

// BenchmarkHandoff measures the fixed cost of one task: a one-token layer
// so small (16 experts, 256 x 256) that the work inside the task is a few
// microseconds, run through Layer.Forward (Go: pinning, cgo, Sync) and
// through a HostTask's C functions looped on one thread (what the hybrid
// step's host nodes do), with a busy gap between tasks as the GPU part of
// a decode step leaves. ns/task is submit to sync return; task-ns is the
// engine's own time for the task (the fused phase), so overhead-ns is what
// the hand-off adds: queue pick-up, worker wake-up, completion, sync.
func BenchmarkHandoff(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) { benchHandoff(b, threads) })
	}
}

// benchHandoff is BenchmarkHandoff on an engine of the given thread count:
// with fewer threads than cores the submitter has a core of its own (the
// default on the GPU machine, 15 workers on 16 cores); with as many, the
// machine is oversubscribed and the spinning must yield.
func benchHandoff(b *testing.B, threads int) {
	spec := small
	spec.Method = AMXINT4
	const topK = 8
	e := newEngine(b, spec, 1, threads, 1, topK, ISAAuto)
	l, err := e.NewLayer(spec, sourceFor(spec.Method, spec))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	H := spec.Hidden
	x, ids, w := RandomBatch(3, 1, topK, H, spec.Experts)
	report := func(b *testing.B, tasks int, total time.Duration) {
		ph := e.Phases()
		if ph.Fused != tasks {
			b.Fatalf("%d fused tasks of %d", ph.Fused, tasks)
		}
		inTask := ph.Seconds[len(PhaseNames)-1] * 1e9 / float64(tasks)
		per := float64(total.Nanoseconds()) / float64(tasks)
		b.ReportMetric(per, "ns/task")
		b.ReportMetric(inTask, "task-ns")
		b.ReportMetric(per-inTask, "overhead-ns")
	}
	b.Run("Forward", func(b *testing.B) {
		out := make([]float32, H)
		batch := &Batch{Tokens: 1, TopK: topK, X: x, IDs: ids, Weights: w, Out: out}
		if err := l.Forward(batch); err != nil {
			b.Fatal(err)
		}
		e.Phases()
		n := 0
		start := time.Now()
		for b.Loop() {
			if err := l.Forward(batch); err != nil {
				b.Fatal(err)
			}
			n++
		}
		report(b, n, time.Since(start))
	})
	xs := unsafe.Slice((*float32)(unsafe.Pointer(&cMem(b, H*4)[0])), H)
	outs := unsafe.Slice((*float32)(unsafe.Pointer(&cMem(b, H*4)[0])), H)
	idb := unsafe.Slice((*int32)(unsafe.Pointer(&cMem(b, topK*4)[0])), topK)
	wb := unsafe.Slice((*float32)(unsafe.Pointer(&cMem(b, topK*4)[0])), topK)
	copy(xs, x)
	copy(idb, ids)
	copy(wb, w)
	task, err := l.NewHostTask(HostTaskMem{Tokens: 1, TopK: topK, X: unsafe.Pointer(&xs[0]), Out: unsafe.Pointer(&outs[0]),
		IDs: unsafe.Pointer(&idb[0]), Weights: unsafe.Pointer(&wb[0])})
	if err != nil {
		b.Fatal(err)
	}
	defer task.Free()
	for _, gap := range []time.Duration{0, 50 * time.Microsecond, 400 * time.Microsecond, 2 * time.Millisecond} {
		b.Run(fmt.Sprintf("HostTask/gap=%v", gap), func(b *testing.B) {
			task.loopOnThread(1, 0)
			e.Phases()
			n := max(b.N, 1)
			b.ResetTimer()
			report(b, n, task.loopOnThread(n, gap))
		})
	}
}
