//go:build cgo

package cuda

import (
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ktserve/kt/tensor"
)

// miniModel is a one-layer MoE decoder with real op shapes (smaller
// widths), enough to exercise every op a decode step uses.
type miniModel struct {
	H, V, Hq, Hkv, D, E, K, I             int
	embed, norm1, norm2, wqkv, wo, wr, lm Buffer
	ex                                    *Experts
	cache                                 *KVCache
	// Fixed per-step buffers (graph replay reuses their addresses).
	ids, pos, slot, seqLen, bt, params             Buffer
	x, h, qkv, attn, o, rlog, rid, rw, moe, logits Buffer
	toks, ws                                       Buffer
	moeWS                                          *MoEWorkspace
	maxPages, splits                               int
}

func newMiniModel(t *testing.T, d *Device, seed uint64) *miniModel {
	rng := rand.New(rand.NewPCG(seed, 9))
	m := &miniModel{H: 512, V: 4096, Hq: 8, Hkv: 2, D: 128, E: 16, K: 4, I: 256, maxPages: 8}
	qkvW := (m.Hq + 2*m.Hkv) * m.D
	m.embed = upload(t, d, randBF16(rng, m.V*m.H, 1))
	m.norm1 = upload(t, d, randBF16(rng, m.H, 0.1))
	m.norm2 = upload(t, d, randBF16(rng, m.H, 0.1))
	m.wqkv = upload(t, d, randBF16(rng, qkvW*m.H, 0.05))
	m.wo = upload(t, d, randBF16(rng, m.H*m.Hq*m.D, 0.05))
	m.wr = upload(t, d, randBF16(rng, m.E*m.H, 0.05))
	m.lm = upload(t, d, randBF16(rng, m.V*m.H, 0.05))
	m.ex = &Experts{W13: upload(t, d, randBF16(rng, m.E*2*m.I*m.H, 0.05)), W2: upload(t, d, randBF16(rng, m.E*m.H*m.I, 0.05)), E: m.E, H: m.H, I: m.I}
	var err error
	if m.cache, err = d.NewKVCache(m.maxPages, 16, m.Hkv, m.D); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.cache.Free(d) })
	bt := make([]int32, m.maxPages)
	for i := range bt {
		bt[i] = int32(m.maxPages - 1 - i)
	}
	m.bt = upload(t, d, bt)
	m.ids = upload(t, d, []int32{0})
	m.pos = upload(t, d, []int32{0})
	m.slot = upload(t, d, []int32{0})
	m.seqLen = upload(t, d, []int32{0})
	m.params = upload(t, d, []PickParams{{}})
	for _, b := range []struct {
		p *Buffer
		n int
	}{{&m.x, m.H * 2}, {&m.h, m.H * 2}, {&m.qkv, qkvW * 2}, {&m.attn, m.Hq * m.D * 2}, {&m.o, m.H * 2}, {&m.rlog, m.E * 2},
		{&m.rid, m.K * 4}, {&m.rw, m.K * 4}, {&m.moe, m.H * 2}, {&m.logits, m.V * 4}, {&m.toks, 8}} {
		*b.p = poisoned(t, d, int64(b.n))
	}
	m.splits = 4
	m.ws = poisoned(t, d, DecodeWorkspaceBytes(1, m.Hq, m.D, m.splits))
	if m.moeWS, err = d.NewMoEWorkspace(1, m.K, m.ex); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.moeWS.Free(d) })
	return m
}

// step queues one decode step reading the token, position, cache slot and
// length from the fixed device buffers.
func (m *miniModel) step(d *Device, s *Stream) error {
	bf := tensor.BF16
	qkvW := (m.Hq + 2*m.Hkv) * m.D
	steps := []func() error{
		func() error { return d.Embed(s, m.x, m.embed, m.ids, 1, m.V, m.H) },
		func() error { return d.RMSNorm(s, m.h, m.x, m.norm1, 1, m.H, int64(m.H), int64(m.H), 1e-6, NormPlain) },
		func() error {
			return d.Gemm(s, GemmArgs{M: 1, N: qkvW, K: m.H, A: m.h, B: m.wqkv, D: m.qkv, AType: bf, BType: bf, DType: bf})
		},
		func() error {
			return d.Rope(s, RopeArgs{X: m.qkv, Pos: m.pos, T: 1, Heads: m.Hq + m.Hkv, HeadDim: m.D, RotDim: m.D, TokStride: int64(qkvW), Theta: 1e6})
		},
		func() error {
			k := m.qkv.Slice(int64(m.Hq*m.D*2), int64(m.Hkv*m.D*2))
			v := m.qkv.Slice(int64((m.Hq+m.Hkv)*m.D*2), int64(m.Hkv*m.D*2))
			return d.StoreKV(s, m.cache, k, v, int64(qkvW), int64(qkvW), m.slot, 1)
		},
		func() error {
			return d.AttentionDecode(s, DecodeArgs{Out: m.attn, Q: m.qkv, QStride: int64(qkvW), Cache: m.cache, BlockTable: m.bt, MaxPages: m.maxPages,
				SeqLens: m.seqLen, B: 1, QHeads: m.Hq, Scale: 0.0884, Splits: m.splits, Work: &AttnWorkspace{m.ws}})
		},
		func() error {
			return d.Gemm(s, GemmArgs{M: 1, N: m.H, K: m.Hq * m.D, A: m.attn, B: m.wo, D: m.o, AType: bf, BType: bf, DType: bf})
		},
		func() error { return d.AddRMSNorm(s, m.h, m.x, m.o, m.norm2, 1, m.H, 1e-6, NormPlain) },
		func() error {
			return d.Gemm(s, GemmArgs{M: 1, N: m.E, K: m.H, A: m.h, B: m.wr, D: m.rlog, AType: bf, BType: bf, DType: bf})
		},
		func() error { return d.RouterTopK(s, m.rid, m.rw, m.rlog, 1, m.E, m.K, true) },
		func() error { return d.ExpertFFN(s, m.x, m.h, m.rid, m.rw, 1, m.ex, m.moeWS, Buffer{}, true) },
		func() error {
			return d.Gemm(s, GemmArgs{M: 1, N: m.V, K: m.H, A: m.x, B: m.lm, D: m.logits, AType: bf, BType: bf, DType: tensor.F32})
		},
		func() error { return d.Pick(s, m.toks, m.logits, m.params, 1, m.V) },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// TestGraphDecodeStep captures a whole decode step (embedding to sampled
// token, with the step's inputs copied from pinned host memory at fixed
// addresses and a host function and a host flag at the end) into a CUDA
// graph, replays it for several tokens, and checks every replay against
// the same step run eagerly on an identical model.
func TestGraphDecodeStep(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	eager, graphed := newMiniModel(t, d, 1), newMiniModel(t, d, 1)
	// Pinned staging: [token, position, slot, seqLen] in, [token] out.
	in, err := d.AllocHost(16)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Free()
	outH, err := d.AllocHost(4)
	if err != nil {
		t.Fatal(err)
	}
	defer outH.Free()
	flag, err := d.NewHostFlag()
	if err != nil {
		t.Fatal(err)
	}
	defer flag.Free()
	stage := func(m *miniModel) error {
		for i, b := range []Buffer{m.ids, m.pos, m.slot, m.seqLen} {
			if err := s.CopyHtoD(b, in, int64(4*i), 4); err != nil {
				return err
			}
		}
		return nil
	}
	g, err := s.Capture(func() error {
		if err := stage(graphed); err != nil {
			return err
		}
		if err := graphed.step(d, s); err != nil {
			return err
		}
		if err := s.CopyDtoH(outH, 0, graphed.toks, 4); err != nil {
			return err
		}
		return s.SignalFlag(flag, 7)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	tok := int32(17)
	for i := 0; i < 12; i++ {
		vals := HostSlice[int32](in)
		vals[0], vals[1], vals[2], vals[3] = tok, int32(i), eager.blockSlot(i), int32(i+1)
		// Eager run of the same step on the twin model.
		if err := stage(eager); err != nil {
			t.Fatal(err)
		}
		if err := eager.step(d, s); err != nil {
			t.Fatal(err)
		}
		wantLogits := download[float32](t, d, s, eager.logits, eager.V)
		wantTok := download[float32](t, d, s, eager.toks, 1)[0]
		flag.Store(0)
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		gotLogits := download[float32](t, d, s, graphed.logits, graphed.V)
		gotTok := HostSlice[float32](outH)[0]
		for j := range wantLogits {
			if gotLogits[j] != wantLogits[j] {
				t.Fatalf("step %d: logit %d = %g after graph replay, %g eager", i, j, gotLogits[j], wantLogits[j])
			}
		}
		if gotTok != wantTok {
			t.Fatalf("step %d: graph picked %v, eager %v", i, gotTok, wantTok)
		}
		if flag.Load() != 7 {
			t.Fatalf("step %d: flag %d after the replay, want 7", i, flag.Load())
		}
		tok = int32(gotTok)
	}
	t.Logf("12 graph replays matched eager decode steps bit for bit; last token %d", tok)
}

// blockSlot returns the cache slot of position p under the model's block
// table (pages in reverse order).
func (m *miniModel) blockSlot(p int) int32 {
	return int32((m.maxPages-1-p/16)*16 + p%16)
}

// TestStreamsEvents checks cross-stream ordering through an event.
func TestStreamsEvents(t *testing.T) {
	d := testDevice(t)
	s1, s2 := testStream(t, d), testStream(t, d)
	const n = 64 << 20
	a := poisoned(t, d, n)
	b := poisoned(t, d, n)
	c := poisoned(t, d, n)
	ev, err := d.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	start, err := d.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	defer start.Destroy()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(start.Record(s1))
	must(s1.Memset(a, 0x3c))
	must(s1.CopyDtoD(b, a, n))
	must(ev.Record(s1))
	must(s2.Wait(ev))
	must(s2.CopyDtoD(c, b, n))
	must(s2.Synchronize())
	must(s1.Synchronize())
	got := download[byte](t, d, s2, c, n)
	for i := 0; i < n; i += 4093 {
		if got[i] != 0x3c {
			t.Fatalf("byte %d = %#x after the event-ordered copies, want 0x3c", i, got[i])
		}
	}
	ms, err := ev.Elapsed(start)
	must(err)
	if ms <= 0 {
		t.Fatalf("elapsed %g ms", ms)
	}
	done, err := ev.Done()
	must(err)
	if !done {
		t.Fatal("event not done after synchronize")
	}
	t.Logf("memset+copy of %d MiB: %.3f ms", n>>20, ms)
}

// TestKernelCache compiles every module into an empty cache directory, then
// checks a second device instance loads them from the cache, and that a
// corrupt cache entry is recompiled.
func TestKernelCache(t *testing.T) {
	d := testDevice(t)
	dir := t.TempDir()
	k1 := newKernels(d, dir)
	defer k1.close()
	d2 := *d
	d2.kern = k1
	st, err := d2.CompileAll()
	if err != nil {
		t.Fatal(err)
	}
	for m, v := range st {
		if !strings.HasPrefix(v, "compiled") {
			t.Fatalf("module %s: %s, want compiled", m, v)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(ModuleNames()) {
		t.Fatalf("%d cache files for %d modules", len(ents), len(ModuleNames()))
	}
	// Corrupt one entry.
	if err := os.WriteFile(dir+"/"+ents[0].Name(), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	k2 := newKernels(d, dir)
	defer k2.close()
	d2.kern = k2
	st, err = d2.CompileAll()
	if err != nil {
		t.Fatal(err)
	}
	hits, re := 0, 0
	for _, v := range st {
		switch {
		case strings.HasPrefix(v, "cache hit"):
			hits++
		case strings.HasPrefix(v, "recompiled"):
			re++
		}
	}
	if hits != len(st)-1 || re != 1 {
		t.Fatalf("second load: %d cache hits, %d recompiled of %d: %v", hits, re, len(st), st)
	}
}

// TestErrorsNameTheCall checks that failures come back as errors naming
// what failed, not crashes.
func TestErrorsNameTheCall(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	if _, err := d.Alloc(1<<50, "giant"); err == nil || !strings.Contains(err.Error(), "giant") || !strings.Contains(err.Error(), "--mem-fraction-static") {
		t.Fatalf("giant allocation: %v", err)
	}
	small := poisoned(t, d, 64)
	err := d.RMSNorm(s, small, small, small, 4, 2048, 2048, 2048, 1e-6, NormPlain)
	if err == nil || !strings.Contains(err.Error(), "RMSNorm") {
		t.Fatalf("undersized RMSNorm: %v", err)
	}
	if err := d.launch(s, "no_such_kernel", grid1(1), grid1(1), 0); err == nil || !strings.Contains(err.Error(), "no_such_kernel") {
		t.Fatalf("unknown kernel: %v", err)
	}
	// A launch the driver rejects (too many threads) names cuLaunchKernel.
	err = d.launch(s, "add_bf16", grid1(1), grid1(4096), 0, small, small, small, int64(1))
	if err == nil || !strings.Contains(err.Error(), "cuLaunchKernel(add_bf16") {
		t.Fatalf("bad launch: %v", err)
	}
	t.Logf("example error: %v", err)
}

// launchChain queues steps adds that ping-pong between x0 and x1 (x1 = x0 +
// one, then x0 = x1 + one, ...): each kernel reads what the one before it
// wrote and overwrites what the one before that read, so a kernel that ran
// ahead of its predecessor's end would read stale values or clobber live
// ones.
func launchChain(d *Device, s *Stream, x0, x1, one Buffer, n, steps int) error {
	for i := 0; i < steps; i++ {
		src, dst := x0, x1
		if i%2 == 1 {
			src, dst = x1, x0
		}
		if err := d.Add(s, dst, src, one, n); err != nil {
			return err
		}
	}
	return nil
}

// setEarlyLaunch sets d's early-launch switch for one test and restores it.
func setEarlyLaunch(tb testing.TB, d *Device, on bool) {
	prev := d.earlyLaunch
	d.earlyLaunch = on
	tb.Cleanup(func() { d.earlyLaunch = prev })
}

// TestEarlyLaunchChain runs a chain of dependent multi-wave kernels with
// programmatic dependent launch on (where the GPU has it) and off, eager
// and as a replayed graph: every element must have counted every step.
func TestEarlyLaunchChain(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	t.Logf("early launch by default: %v (compute capability %d.%d, driver %d)", d.EarlyLaunch(), d.Info.Major, d.Info.Minor, d.Info.DriverVersion)
	const n, steps = 1 << 22, 200 // 200 is exact in bf16
	ones := make([]uint16, n)
	for i := range ones {
		ones[i] = tensor.F32ToBF16(1)
	}
	one := upload(t, d, ones)
	zero := make([]uint16, n)
	x0, x1 := upload(t, d, zero), upload(t, d, zero)
	modes := []bool{false}
	if d.EarlyLaunch() {
		modes = append(modes, true)
	}
	for _, early := range modes {
		for _, graph := range []bool{false, true} {
			setEarlyLaunch(t, d, early)
			if err := Upload(d, x0, zero); err != nil {
				t.Fatal(err)
			}
			if graph {
				g, err := s.Capture(func() error { return launchChain(d, s, x0, x1, one, n, steps) })
				if err != nil {
					t.Fatal(err)
				}
				err = g.Launch(s)
				g.Destroy()
				if err != nil {
					t.Fatal(err)
				}
			} else if err := launchChain(d, s, x0, x1, one, n, steps); err != nil {
				t.Fatal(err)
			}
			got := download[uint16](t, d, s, x0, n)
			bad := 0
			for i, v := range got {
				if tensor.BF16ToF32(v) != steps {
					if bad < 5 {
						t.Errorf("early=%v graph=%v: element %d counted %v, want %d", early, graph, i, tensor.BF16ToF32(v), steps)
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("early=%v graph=%v: %d of %d elements wrong", early, graph, bad, n)
			}
		}
	}
}

// TestKernelCopy checks Device.KernelCopy between device memory and mapped
// pinned host memory in both directions, three copies of odd sizes in one
// launch, eager and in a replayed graph.
func TestKernelCopy(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	rng := rand.New(rand.NewPCG(5, 9))
	sizes := []int{2048*3 + 5, 17, 1} // words
	src := make([][]uint32, len(sizes))
	dev := make([]Buffer, len(sizes))
	host := make([]*HostBuffer, len(sizes))
	for i, n := range sizes {
		src[i] = make([]uint32, n)
		for j := range src[i] {
			src[i][j] = rng.Uint32()
		}
		dev[i] = upload(t, d, src[i])
		h, err := d.AllocHost(int64(4 * n))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Free() })
		host[i] = h
	}
	copies := func(toHost bool) []WordCopy {
		var cs []WordCopy
		for i, n := range sizes {
			hp, err := host[i].DevicePtr()
			if err != nil {
				t.Fatal(err)
			}
			c := WordCopy{Dst: hp, Src: dev[i].Ptr, N: int64(4 * n)}
			if !toHost {
				c.Dst, c.Src = c.Src, c.Dst
			}
			cs = append(cs, c)
		}
		return cs
	}
	for _, graph := range []bool{false, true} {
		for i := range sizes {
			clear(HostSlice[uint32](host[i]))
		}
		run := func(fn func() error) {
			if !graph {
				if err := fn(); err != nil {
					t.Fatal(err)
				}
				return
			}
			g, err := s.Capture(fn)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Destroy()
			if err := g.Launch(s); err != nil {
				t.Fatal(err)
			}
		}
		run(func() error { return d.KernelCopy(s, copies(true)...) })
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for i := range sizes {
			got := HostSlice[uint32](host[i])
			for j, v := range src[i] {
				if got[j] != v {
					t.Fatalf("graph=%v: device to host, copy %d word %d: %#x, want %#x", graph, i, j, got[j], v)
				}
			}
			for j := range got { // new values to bring back
				got[j] = ^src[i][j]
			}
		}
		run(func() error { return d.KernelCopy(s, copies(false)...) })
		for i, n := range sizes {
			back := download[uint32](t, d, s, dev[i], n)
			for j, v := range back {
				if v != ^src[i][j] {
					t.Fatalf("graph=%v: host to device, copy %d word %d: %#x, want %#x", graph, i, j, v, ^src[i][j])
				}
			}
			if err := Upload(d, dev[i], src[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestStreamWaitHost checks Stream.WaitHost: work queued behind a wait for
// a pinned counter does not run while the counter is short of the value
// (polled for 50 ms), runs once the host stores it and reads what the host
// wrote before the store (copies from pinned memory queued behind the
// wait, by kernel and by a copy engine), and a later wait for the next
// value holds again; a counter that wrapped past the value still lets the
// work through (the cyclic comparison). Out-of-range offsets are refused.
func TestStreamWaitHost(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	wait := s.WaitHost
	flag, err := d.AllocHost(64)
	if err != nil {
		t.Fatal(err)
	}
	defer flag.Free()
	data, err := d.AllocHost(4096)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Free()
	ctr, src := HostSlice[uint32](flag), HostSlice[byte](data)
	ev, err := d.NewEvent(false)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	buf, got, got2 := poisoned(t, d, 4096), poisoned(t, d, 4096), poisoned(t, d, 4096)
	// Load the kernels first: a module's first load may wait for the work
	// queued on the device, here behind a wait only this thread releases.
	ctr[1] = 0
	if err := wait(flag, 4, 0); err == nil {
		err = d.CopyHost(s, false, HostCopy{Host: data, Dev: got, N: 4096})
		if err == nil {
			err = s.Synchronize()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	held := func(v uint32, fill byte, set uint32) {
		t.Helper()
		for i := range src {
			src[i] = 0
		}
		if err := wait(flag, 4, v); err != nil {
			t.Fatal(err)
		}
		if err := s.Memset(buf, fill); err != nil {
			t.Fatal(err)
		}
		if err := d.CopyHost(s, false, HostCopy{Host: data, Dev: got, N: 4096}); err != nil {
			t.Fatal(err)
		}
		if err := s.CopyHtoD(got2, data, 0, 4096); err != nil {
			t.Fatal(err)
		}
		if err := ev.Record(s); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
			if done, err := ev.Done(); err != nil || done {
				t.Fatalf("work behind a wait for %d ran with the counter at %d (err %v)", v, atomic.LoadUint32(&ctr[1]), err)
			}
		}
		for i := range src {
			src[i] = fill
		}
		atomic.StoreUint32(&ctr[1], set)
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if b := download[byte](t, d, s, buf, 4096); b[0] != fill || b[4095] != fill {
			t.Fatalf("after the store of %d: bytes %#x %#x, want %#x", set, b[0], b[4095], fill)
		}
		for i, dst := range []Buffer{got, got2} {
			if b := download[byte](t, d, s, dst, 4096); b[0] != fill || b[4095] != fill {
				t.Fatalf("after the store of %d: host bytes copied (copy engine %v) %#x %#x, want %#x (written before the store)", set, i == 1, b[0], b[4095], fill)
			}
		}
	}
	ctr[1] = 0
	held(1, 0x11, 1)
	held(2, 0x22, 2)
	ctr[1] = 0xfffffffe
	held(0xffffffff, 0x33, 1) // 1 is past 0xffffffff once the counter wraps
	for _, off := range []int64{-4, 2, 64} {
		if err := wait(flag, off, 1); err == nil {
			t.Errorf("a wait at byte %d of a 64-byte buffer was queued", off)
		}
	}
}
