//go:build linux && amd64 && cgo

package cpuexperts

import (
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// cMem maps n zeroed bytes outside the Go heap (what a HostTask's memory
// must be: the C side keeps its addresses).
func cMem(t *testing.T, n int) []byte {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

// TestHostTaskF32 runs a HostTask with f32 input and output (the hybrid
// step's graph form: the GPU's f32 rows copied into page-locked memory) on
// a thread Go does not know, for a fixed token count and for one read
// through NTok, and requires the output to equal Layer.Forward's on the
// same f32 batch bit for bit.
func TestHostTaskF32(t *testing.T) {
	const maxTok, topK = 8, 4
	for _, m := range []Method{BF16, AMXINT8, AMXINT4} {
		t.Run(string(m), func(t *testing.T) {
			spec := small
			spec.Method = m
			e := newEngine(t, spec, 1, 2, maxTok, topK, ISAAuto)
			l, err := e.NewLayer(spec, sourceFor(m, spec))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			H := spec.Hidden
			xs := unsafe.Slice((*float32)(unsafe.Pointer(&cMem(t, maxTok*H*4)[0])), maxTok*H)
			outs := unsafe.Slice((*float32)(unsafe.Pointer(&cMem(t, maxTok*H*4)[0])), maxTok*H)
			idb := unsafe.Slice((*int32)(unsafe.Pointer(&cMem(t, maxTok*topK*4)[0])), maxTok*topK)
			wb := unsafe.Slice((*float32)(unsafe.Pointer(&cMem(t, maxTok*topK*4)[0])), maxTok*topK)
			nt := (*int32)(unsafe.Pointer(&cMem(t, 4)[0]))
			mem := HostTaskMem{TopK: topK, X: unsafe.Pointer(&xs[0]), Out: unsafe.Pointer(&outs[0]),
				IDs: unsafe.Pointer(&idb[0]), Weights: unsafe.Pointer(&wb[0])}
			for _, tc := range []struct {
				name   string
				tokens int
				viaPtr bool
			}{{"fixed 1 token", 1, false}, {"fixed 5 tokens", 5, false}, {"NTok 3 tokens", 3, true}} {
				x, ids, w := RandomBatch(uint64(tc.tokens)+11, tc.tokens, topK, H, spec.Experts)
				copy(xs, x)
				copy(idb, ids)
				copy(wb, w)
				mm := mem
				if tc.viaPtr {
					*nt = int32(tc.tokens)
					mm.NTok = nt
				} else {
					mm.Tokens = tc.tokens
				}
				task, err := l.NewHostTask(mm)
				if err != nil {
					t.Fatal(err)
				}
				if err := task.runOnCThread(); err != nil {
					t.Fatal(err)
				}
				task.Free()
				if err := e.Sync(); err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				want := make([]float32, tc.tokens*H)
				if err := l.Forward(&Batch{Tokens: tc.tokens, TopK: topK, X: x, IDs: ids, Weights: w, Out: want}); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if outs[i] != want[i] {
						t.Fatalf("%s: out[%d] = %g, Layer.Forward gives %g", tc.name, i, outs[i], want[i])
					}
				}
			}
		})
	}
}

// TestHostTaskRefusals checks NewHostTask's argument errors.
func TestHostTaskRefusals(t *testing.T) {
	spec := small
	spec.Method = BF16
	e := newEngine(t, spec, 1, 1, 4, 2, ISAAuto)
	l, err := e.NewLayer(spec, sourceFor(BF16, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p := unsafe.Pointer(&cMem(t, 4096)[0])
	for _, m := range []HostTaskMem{
		{Tokens: 1, TopK: 3, X: p, Out: p, IDs: p, Weights: p},
		{Tokens: 5, TopK: 2, X: p, Out: p, IDs: p, Weights: p},
		{Tokens: 1, TopK: 2, Out: p, IDs: p, Weights: p},
	} {
		if task, err := l.NewHostTask(m); err == nil {
			task.Free()
			t.Errorf("NewHostTask(%+v) succeeded", m)
		}
	}
}

// TestHostTaskCountOverMax checks that a token count past the engine's
// maximum, written where a CUDA stream's host function reads it (NTok, so
// no Go check sees it), is refused by the task before any worker reads the
// rows, that Sync reports it, and that the engine then runs the next task
// as before.
func TestHostTaskCountOverMax(t *testing.T) {
	const maxTok, topK = 16, 4
	spec := small
	spec.Method = AMXBF16
	e := newEngine(t, spec, 1, 2, maxTok, topK, ISAAuto)
	l, err := e.NewLayer(spec, sourceFor(spec.Method, spec))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	H := spec.Hidden
	xs := unsafe.Slice((*float32)(unsafe.Pointer(&cMem(t, maxTok*H*4)[0])), maxTok*H)
	outs := unsafe.Slice((*float32)(unsafe.Pointer(&cMem(t, maxTok*H*4)[0])), maxTok*H)
	idb := unsafe.Slice((*int32)(unsafe.Pointer(&cMem(t, maxTok*topK*4)[0])), maxTok*topK)
	wb := unsafe.Slice((*float32)(unsafe.Pointer(&cMem(t, maxTok*topK*4)[0])), maxTok*topK)
	nt := (*int32)(unsafe.Pointer(&cMem(t, 4)[0]))
	x, ids, w := RandomBatch(31, maxTok, topK, H, spec.Experts)
	copy(xs, x)
	copy(idb, ids)
	copy(wb, w)
	task, err := l.NewHostTask(HostTaskMem{TopK: topK, NTok: nt, X: unsafe.Pointer(&xs[0]), Out: unsafe.Pointer(&outs[0]),
		IDs: unsafe.Pointer(&idb[0]), Weights: unsafe.Pointer(&wb[0])})
	if err != nil {
		t.Fatal(err)
	}
	defer task.Free()
	*nt = maxTok + 1
	if err := task.runOnCThread(); err != nil {
		t.Fatal(err)
	}
	if err := e.Sync(); err == nil || !strings.Contains(err.Error(), "engine sized for at most 16") {
		t.Fatalf("17 tokens on an engine of 16: Sync err = %v, want the refusal", err)
	}
	const tokens = 5
	*nt = tokens
	if err := task.runOnCThread(); err != nil {
		t.Fatal(err)
	}
	if err := e.Sync(); err != nil {
		t.Fatalf("the task after a refused one: %v", err)
	}
	want := make([]float32, tokens*H)
	if err := l.Forward(&Batch{Tokens: tokens, TopK: topK, X: x[:tokens*H], IDs: ids[:tokens*topK], Weights: w[:tokens*topK], Out: want}); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if outs[i] != want[i] {
			t.Fatalf("the task after a refused one: out[%d] = %g, Layer.Forward gives %g", i, outs[i], want[i])
		}
	}
}
