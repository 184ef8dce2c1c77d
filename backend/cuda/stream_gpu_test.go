//go:build cgo

package cuda

import (
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// addF32 queues out = a + b over n float32 elements (m_add).
func addF32(d *Device, s *Stream, out, a, b Buffer, n int) error {
	return d.launch(s, "m_add", grid1(blocks(n, 256)), grid1(256), 0, out, a, b, int64(n))
}

// TestGraphHostStaging captures a step's shape (inputs copied from pinned
// host memory at fixed addresses, a kernel, the result copied back) into a
// CUDA graph and replays it for several inputs: each replay must read the
// values the host staged before it and write the result back to pinned
// memory.
func TestGraphHostStaging(t *testing.T) {
	d := testDevice(t)
	s := testStream(t, d)
	const n = 4096
	in, err := d.AllocHost(2 * n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Free()
	outH, err := d.AllocHost(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer outH.Free()
	a, b, sum := poisoned(t, d, n*4), poisoned(t, d, n*4), poisoned(t, d, n*4)
	g, err := s.Capture(func() error {
		if err := s.CopyHtoD(a, in, 0, n*4); err != nil {
			return err
		}
		if err := s.CopyHtoD(b, in, n*4, n*4); err != nil {
			return err
		}
		if err := addF32(d, s, sum, a, b, n); err != nil {
			return err
		}
		return s.CopyDtoH(outH, 0, sum, n*4)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	rng := rand.New(rand.NewPCG(3, 7))
	for i := 0; i < 12; i++ {
		vals := HostSlice[float32](in)
		for j := range vals {
			vals[j] = float32(rng.NormFloat64())
		}
		if err := g.Launch(s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := HostSlice[float32](outH)
		for j := range got {
			if want := vals[j] + vals[n+j]; got[j] != want {
				t.Fatalf("replay %d: element %d = %g, want %g", i, j, got[j], want)
			}
		}
	}
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
	ix, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(ix.mods) {
		t.Fatalf("%d cache files for %d modules", len(ents), len(ix.mods))
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
	err := d.RouteLogits(s, small.Ptr, small, small, small, 4, 8, 2048)
	if err == nil || !strings.Contains(err.Error(), "RouteLogits") {
		t.Fatalf("undersized RouteLogits: %v", err)
	}
	if err := d.launch(s, "no_such_kernel", grid1(1), grid1(1), 0); err == nil || !strings.Contains(err.Error(), "no_such_kernel") {
		t.Fatalf("unknown kernel: %v", err)
	}
	// A launch the driver rejects (too many threads) names cuLaunchKernel.
	err = d.launch(s, "m_add", grid1(1), grid1(4096), 0, small, small, small, int64(1))
	if err == nil || !strings.Contains(err.Error(), "cuLaunchKernel(m_add") {
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
		if err := addF32(d, s, dst, src, one, n); err != nil {
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
	const n, steps = 1 << 22, 200
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	one := upload(t, d, ones)
	zero := make([]float32, n)
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
			got := download[float32](t, d, s, x0, n)
			bad := 0
			for i, v := range got {
				if v != steps {
					if bad < 5 {
						t.Errorf("early=%v graph=%v: element %d counted %v, want %d", early, graph, i, v, steps)
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
