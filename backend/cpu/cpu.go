// Package cpu is the reference implementation of the backend op set: every
// op in plain Go, with the hot ones (matmul over bf16/f16/f32 weights) in C
// with AVX-512 intrinsics through cgo, selected at run time by CPUID so that
// a CPU without AVX-512 runs the Go code instead of dying with SIGILL.
//
// Weights are used in place: a bf16 tensor handed to Weight keeps aliasing
// the caller's bytes (the mmap of a safetensors file); nothing is copied.
// Activations are F32 slices allocated once.
package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// Tensor is the CPU backend's tensor: a typed view of host memory.
type Tensor struct {
	dt    tensor.DType
	shape []int
	n     int // elements
	f32   []float32
	u16   []uint16 // BF16, F16
	i32   []int32
	fp8   *fp8Weight // F8E4M3: codes and block scales
	name  string
}

// DType implements backend.Tensor.
func (t *Tensor) DType() tensor.DType { return t.dt }

// Shape implements backend.Tensor.
func (t *Tensor) Shape() []int { return t.shape }

// F32 returns the tensor's data when it is F32 (nil otherwise).
func (t *Tensor) F32() []float32 { return t.f32 }

// I32 returns the tensor's data when it is I32 (nil otherwise).
func (t *Tensor) I32() []int32 { return t.i32 }

// cols is the size of the last dimension.
func (t *Tensor) cols() int { return t.arg().Cols() }

// arg describes t to the shared argument checks.
func (t *Tensor) arg() backend.Arg {
	a := backend.Arg{Name: t.name, DType: t.dt, Shape: t.shape, Len: t.n}
	if t.fp8 != nil {
		a.Block = [2]int{t.fp8.bn, t.fp8.bk}
	}
	return a
}

func (t *Tensor) label() string { return t.arg().Label() }

// Options configures a CPU backend.
type Options struct {
	// Threads is the number of worker goroutines for parallel ops; 0
	// means runtime.NumCPU().
	Threads int
	// NoSIMD forces the portable Go kernels (for tests and comparison).
	NoSIMD bool
	// CPUs, when set, pins the workers: the pool's goroutine i (1 ≤ i <
	// Threads) runs on a thread of its own bound to CPUs[i % len(CPUs)].
	// The goroutine calling the ops also works on each op; the caller pins
	// it (PinThread with CPUs[0]) where it wants to.
	CPUs []int
}

// Backend is the CPU backend. It is not safe for concurrent use.
type Backend struct {
	threads int
	simd    bool
	pool    *pool
	pinErr  error // Options.CPUs not applied (PinErr)
	step    *backend.Step
	err     error
	closed  bool

	// scratch for MoE grouping and attention, grown on demand
	moe     moeScratch
	attnBuf [][]float32
	rowSeq  []int32 // step row -> index in step.Seqs
	mmJob   mmJob
	attJob  attnJob
	rope    backend.Rope
	ropeInv []float32
	// MLAttention's per-row rope angles and parallel body,
	// RouterGroupTopK's per-row scores
	mlaCS    []float32
	mlaJob   mlaJob
	routeBuf []float32
}

var _ backend.Backend = (*Backend)(nil)

// New makes a CPU backend.
func New(o Options) *Backend {
	n := o.Threads
	if n <= 0 {
		n = runtime.NumCPU()
	}
	p, pinErr := newPool(n, o.CPUs)
	b := &Backend{threads: n, simd: !o.NoSIMD && haveAVX512(), pool: p, pinErr: pinErr}
	b.attnBuf = make([][]float32, n)
	return b
}

// Name implements backend.Backend.
func (b *Backend) Name() string {
	isa := "go"
	if b.simd {
		isa = "avx512"
	}
	return fmt.Sprintf("cpu (%s, %d threads)", isa, b.threads)
}

// PinErr reports why Options.CPUs could not be applied to a worker (nil
// when every worker is pinned, or none was asked to be); the backend
// works unpinned then.
func (b *Backend) PinErr() error { return b.pinErr }

// SIMD reports whether the AVX-512 kernels are in use.
func (b *Backend) SIMD() bool { return b.simd }

// Weight implements backend.Backend: the data is used in place.
func (b *Backend) Weight(h backend.Host) (backend.Tensor, error) {
	if err := h.Check(); err != nil {
		return nil, err
	}
	if h.FP8() {
		return fp8Tensor(h)
	}
	t := &Tensor{dt: h.DType, shape: append([]int(nil), h.Shape...), name: h.Name}
	t.n = len(h.Data) / max(h.DType.Size(), 1)
	if t.n == 0 {
		return t, nil
	}
	data := h.Data
	if uintptr(unsafe.Pointer(unsafe.SliceData(data)))%uintptr(h.DType.Size()) != 0 {
		// a file whose header length breaks alignment: copy once into
		// aligned memory rather than reinterpret unaligned bytes
		buf := make([]uint64, (len(data)+7)/8)
		aligned := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)*8)[:len(data)]
		copy(aligned, data)
		data = aligned
	}
	p := unsafe.Pointer(unsafe.SliceData(data))
	switch h.DType {
	case tensor.F32:
		t.f32 = unsafe.Slice((*float32)(p), t.n)
	case tensor.BF16, tensor.F16:
		t.u16 = unsafe.Slice((*uint16)(p), t.n)
	case tensor.I32:
		t.i32 = unsafe.Slice((*int32)(p), t.n)
	default:
		return nil, fmt.Errorf("tensor %s: dtype %s not supported by the cpu backend", h.Name, h.DType)
	}
	return t, nil
}

// Alloc implements backend.Backend.
func (b *Backend) Alloc(dt tensor.DType, shape ...int) (backend.Tensor, error) {
	n := 1
	for _, d := range shape {
		if d < 0 || (d > 0 && n > (1<<40)/d) {
			return nil, fmt.Errorf("cpu: bad allocation shape %v", shape)
		}
		n *= d
	}
	t := &Tensor{dt: dt, shape: append([]int(nil), shape...), n: n}
	switch dt {
	case tensor.F32:
		t.f32 = make([]float32, n)
	case tensor.I32:
		t.i32 = make([]int32, n)
	case tensor.BF16, tensor.F16:
		t.u16 = make([]uint16, n)
	default:
		return nil, fmt.Errorf("cpu: cannot allocate dtype %s", dt)
	}
	return t, nil
}

// ActDType implements backend.Backend: activations are F32.
func (b *Backend) ActDType() tensor.DType { return tensor.F32 }

// AllocKV implements backend.Backend (F32 pages).
func (b *Backend) AllocKV(pages, pageSize, kvHeads, headDim int) (*backend.KVCache, error) {
	k, err := b.Alloc(tensor.F32, pages, pageSize, kvHeads, headDim)
	if err != nil {
		return nil, fmt.Errorf("cpu: KV cache: %w", err)
	}
	v, err := b.Alloc(tensor.F32, pages, pageSize, kvHeads, headDim)
	if err != nil {
		return nil, fmt.Errorf("cpu: KV cache: %w", err)
	}
	return &backend.KVCache{K: k, V: v, PageSize: pageSize, KVHeads: kvHeads, HeadDim: headDim, TotalPages: pages}, nil
}

// SetStep implements backend.Backend.
func (b *Backend) SetStep(s *backend.Step) error {
	if s == nil {
		return errors.New("cpu: nil step")
	}
	if cap(b.rowSeq) < len(s.Tokens) {
		b.rowSeq = make([]int32, len(s.Tokens))
	}
	b.rowSeq = b.rowSeq[:len(s.Tokens)]
	if err := backend.CheckStepRows(s, b.rowSeq); err != nil {
		return fmt.Errorf("cpu: %w", err)
	}
	b.step = s
	return nil
}

// Sync implements backend.Backend.
func (b *Backend) Sync() error {
	err := b.err
	b.err = nil
	return err
}

// Close implements backend.Backend.
func (b *Backend) Close() error {
	if !b.closed {
		b.closed = true
		b.pool.close()
	}
	return nil
}

// fail records the first error.
func (b *Backend) fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf("cpu: "+format, args...)
	}
}

// refuse records err, a failed argument check, and reports whether there
// was one.
func (b *Backend) refuse(err error) bool {
	if err != nil {
		b.fail("%w", err)
		return true
	}
	return false
}

// ok reports whether ops may run (no pending error).
func (b *Backend) ok() bool { return b.err == nil }

// t casts a backend tensor to the CPU type, recording an error for a
// foreign or nil tensor.
func (b *Backend) t(x backend.Tensor, what string) *Tensor {
	t, isCPU := x.(*Tensor)
	if !isCPU || t == nil {
		b.fail("%s: not a cpu tensor", what)
		return nil
	}
	return t
}

// f32 checks that t is an F32 tensor with at least n elements.
func (b *Backend) f32(x backend.Tensor, n int, what string) []float32 {
	t := b.t(x, what)
	if t == nil {
		return nil
	}
	if b.refuse(backend.CheckF32(what, t.arg(), n)) {
		return nil
	}
	return t.f32[:n]
}

// pool runs parallel loops on a fixed set of worker goroutines.
type pool struct {
	n     int
	work  chan poolTask
	wg    sync.WaitGroup
	close func()
}

type poolTask struct {
	j      job
	worker int
	lo, hi int
	done   *sync.WaitGroup
}

// newPool starts the n-1 worker goroutines of a pool of n; with cpus each
// locks its OS thread and binds it to one of them (worker i to
// cpus[i % len(cpus)]), and the first failure to bind is returned.
func newPool(n int, cpus []int) (*pool, error) {
	p := &pool{n: n, work: make(chan poolTask, n)}
	pinned := make(chan error, n)
	for i := 1; i < n; i++ {
		go func() {
			if len(cpus) > 0 {
				// the thread ends with the goroutine (locked at exit)
				runtime.LockOSThread()
				pinned <- PinThread([]int{cpus[i%len(cpus)]})
			}
			for t := range p.work {
				t.j.run(t.worker, t.lo, t.hi)
				t.done.Done()
			}
		}()
	}
	var err error
	if len(cpus) > 0 {
		for i := 1; i < n; i++ {
			if e := <-pinned; e != nil && err == nil {
				err = e
			}
		}
	}
	var once sync.Once
	p.close = func() { once.Do(func() { close(p.work) }) }
	return p, err
}

// job is a parallel loop body. Hot ops pass pointers to job structs kept
// in the Backend, which (unlike closures) do not allocate per call.
type job interface {
	run(worker, lo, hi int)
}

// funcJob adapts a closure to job.
type funcJob func(worker, lo, hi int)

func (f funcJob) run(worker, lo, hi int) { f(worker, lo, hi) }

// run calls fn over [0,n) split into at most p.n contiguous ranges, each a
// multiple of grain (except the last); worker ids are distinct per range.
func (p *pool) run(n, grain int, fn func(worker, lo, hi int)) {
	p.runJob(n, grain, funcJob(fn))
}

// runJob is run for a job value.
func (p *pool) runJob(n, grain int, fn job) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	chunks := (n + grain - 1) / grain
	parts := min(p.n, chunks)
	if parts <= 1 {
		fn.run(0, 0, n)
		return
	}
	per := (chunks + parts - 1) / parts * grain
	p.wg.Add(parts - 1)
	w := 1
	for lo := per; lo < n; lo += per {
		p.work <- poolTask{j: fn, worker: w, lo: lo, hi: min(lo+per, n), done: &p.wg}
		w++
	}
	// the ranges sent may be fewer than parts-1 when n is small
	for ; w < parts; w++ {
		p.wg.Done()
	}
	fn.run(0, 0, min(per, n))
	p.wg.Wait()
}
