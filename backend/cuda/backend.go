//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tensor"
)

// Backend runs the backend.Backend op set (and backend.LinearAttention) on
// one GPU with float32 activations, as the op-set contract says, so the
// model definitions run unchanged and the CPU backend stays their
// reference. Weights are uploaded once in their own dtype (bf16 stays bf16);
// MatMul rounds the activation rows to the weight's 16-bit type in a fixed
// scratch buffer and runs cuBLASLt with float32 output (F32 weights run an
// F32 GEMM). Every buffer comes from the device's pool; the step's metadata
// is copied to device buffers of fixed address in SetStep, from pinned host
// memory, on the backend's stream, so a step's ops can be captured in a
// CUDA graph. Ops record the first error and Sync reports it. A Backend is
// not safe for concurrent use.
type Backend struct {
	d      *Device
	ownDev bool
	s      *Stream
	err    error
	step   *backend.Step
	closed bool
	bufs   map[uint64]Buffer // live pool allocations, freed by Close

	// step metadata: one device buffer and its pinned staging copy, laid
	// out as regions of capT, capS and capP int32s.
	meta             Buffer
	metaHost         *HostBuffer
	capT, capS, capP int
	nPages           int
	rowSeq           []int32

	scratch Buffer // 16-bit copies of MatMul activations
	gemmTmp Buffer // float32 [2n, o]: the hi and lo halves of a split MatMul
	// gemmOK says, per GEMM shape asked for, whether cuBLASLt takes it
	// (false: refused by the heuristic query or by a call; MatMul then
	// uses its own kernels for that shape).
	gemmOK  map[gemmShape]bool
	moe     map[*backend.Experts]*moeTable
	moeH    Buffer // [pairs, inter] float32
	moeY    Buffer // [pairs, hidden] float32
	moeIDs  Buffer // [pairs] int32: ids with experts absent from the table masked to -1
	moeG    moeGrouped
	attnAcc Buffer // float32 [rows, heads, splits, D]: split-K attention partials
	attnML  Buffer // float32 [rows, heads, splits, 2]: their max and sum
	// MLAttention's scratch (mla.go), sized for one chunk of rows: the
	// latent queries [rows, heads, W], the attended latents [rows, heads,
	// R], the split partials and their max and sum; and the device copies
	// of the rope frequencies seen.
	mlaQ, mlaO, mlaAcc, mlaML Buffer
	mlaRope                   []mlaFreqs
	// mlaChunkMax caps MLAttention's rows per chunk (0: by the scratch
	// bound; tests set it to reach several chunks).
	mlaChunkMax int
	// generalOnly keeps the general-shape kernels even where a fast
	// variant fits (tests and benchmarks compare the two).
	generalOnly bool
	// fp8Force names the FP8 MatMul kernel to use ("": picked by shape;
	// tests set it to reach each kernel).
	fp8Force string
	fp8W     Buffer // FP8 weight as bf16 hi and lo halves (fp8SplitGemm)

	// epoch counts reallocations of buffers that kernels are passed
	// (GraphEpoch): a graph captured before one must not be replayed.
	epoch uint64
	// readHost is ReadPinned's page-locked destination.
	readHost *HostBuffer
}

type gemmShape struct {
	m, n, k int
	w       tensor.DType
}

// moeTable is one MoE layer's expert weight addresses on the device.
type moeTable struct {
	ptrs          Buffer // u64 [E][3]: gate, up, down
	e             int
	gdt, udt, ddt int
	partial       bool         // some experts have no weights here (nil entries): their ids are masked to -1
	fp8           *moeFP8Table // FP8 experts: their scales (fp8.go)
}

var (
	_ backend.Backend         = (*Backend)(nil)
	_ backend.LinearAttention = (*Backend)(nil)
)

// ActDType implements backend.Backend: activations are F32, as on the CPU
// backend, so the CPU stays the reference every GPU op is tested against;
// MatMul splits them into two bf16 parts for the tensor cores.
func (b *Backend) ActDType() tensor.DType { return tensor.F32 }

// NewBackend opens the GPU o describes (o.Ordinal = --base-gpu-id, pool from
// o.MemFractionStatic) and returns a backend that owns it. Errors meaning
// "no usable GPU" wrap ErrUnavailable.
func NewBackend(o Options) (*Backend, error) {
	d, err := Open(o)
	if err != nil {
		return nil, err
	}
	b, err := NewBackendOn(d)
	if err != nil {
		d.Close()
		return nil, err
	}
	b.ownDev = true
	return b, nil
}

// NewBackendOn makes a backend on an open device; Close frees what the
// backend allocated but leaves the device open.
func NewBackendOn(d *Device) (*Backend, error) {
	s, err := d.NewStream()
	if err != nil {
		return nil, err
	}
	return &Backend{d: d, s: s, bufs: map[uint64]Buffer{}, gemmOK: map[gemmShape]bool{}, moe: map[*backend.Experts]*moeTable{}}, nil
}

// Device returns the GPU the backend runs on.
func (b *Backend) Device() *Device { return b.d }

// Tensor is the CUDA backend's tensor: a typed range of device memory.
type Tensor struct {
	dt    tensor.DType
	shape []int
	n     int // elements
	buf   Buffer
	name  string
	fp8   *fp8Info // F8E4M3 weights: block scales (fp8.go)
}

// DType implements backend.Tensor.
func (t *Tensor) DType() tensor.DType { return t.dt }

// Shape implements backend.Tensor.
func (t *Tensor) Shape() []int { return t.shape }

// arg describes t to the shared argument checks.
func (t *Tensor) arg() backend.Arg {
	a := backend.Arg{Name: t.name, DType: t.dt, Shape: t.shape, Len: t.n}
	if t.fp8 != nil {
		a.Block = [2]int{t.fp8.bn, t.fp8.bk}
	}
	return a
}

func (t *Tensor) cols() int { return t.arg().Cols() }

func (t *Tensor) label() string { return t.arg().Label() }

// Name implements backend.Backend.
func (b *Backend) Name() string {
	i := &b.d.Info
	return fmt.Sprintf("cuda:%d %s (sm_%d%d, %d MiB)", i.Ordinal, i.Name, i.Major, i.Minor, i.TotalMem>>20)
}

// alloc takes n bytes (at least one alignment unit) from the pool.
func (b *Backend) alloc(n int64, what string) (Buffer, error) {
	buf, err := b.d.Alloc(max(n, PoolAlign), what)
	if err != nil {
		return Buffer{}, err
	}
	b.bufs[buf.Ptr] = buf
	return buf, nil
}

func (b *Backend) free(buf Buffer) {
	if buf.Size == 0 {
		return
	}
	delete(b.bufs, buf.Ptr)
	b.d.Free(buf)
}

func elements(name string, shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 || (d > 0 && n > (1<<40)/d) {
			return 0, fmt.Errorf("cuda: %s: bad shape %v", name, shape)
		}
		n *= d
	}
	return n, nil
}

// Weight implements backend.Backend: the data is uploaded once, in its
// dtype.
func (b *Backend) Weight(h backend.Host) (backend.Tensor, error) {
	if err := h.Check(); err != nil {
		return nil, err
	}
	if h.FP8() {
		return b.weightFP8(h)
	}
	switch h.DType {
	case tensor.F32, tensor.BF16, tensor.F16, tensor.I32:
	default:
		return nil, fmt.Errorf("tensor %s: dtype %s not supported by the cuda backend", h.Name, h.DType)
	}
	n, err := elements(h.Name, h.Shape)
	if err != nil {
		return nil, err
	}
	buf, err := b.alloc(int64(len(h.Data)), "weight "+h.Name)
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", h.Name, err)
	}
	if err := Upload(b.d, buf, h.Data); err != nil {
		b.free(buf)
		return nil, fmt.Errorf("tensor %s: %w", h.Name, err)
	}
	return &Tensor{dt: h.DType, shape: append([]int(nil), h.Shape...), n: n, buf: buf, name: h.Name}, nil
}

// Alloc implements backend.Backend.
func (b *Backend) Alloc(dt tensor.DType, shape ...int) (backend.Tensor, error) {
	n, err := elements("allocation", shape)
	if err != nil {
		return nil, err
	}
	switch dt {
	case tensor.F32, tensor.I32, tensor.BF16, tensor.F16:
	default:
		return nil, fmt.Errorf("cuda: cannot allocate dtype %s", dt)
	}
	buf, err := b.alloc(int64(n)*int64(dt.Size()), fmt.Sprintf("activation %s%v", dt, shape))
	if err != nil {
		return nil, err
	}
	if err := b.s.Memset(buf, 0); err != nil {
		b.free(buf)
		return nil, err
	}
	// An F32 activation may be a MatMul input: keep the 16-bit scratch
	// (two halves) as large as the largest, so MatMul does not allocate;
	// the split output buffer grows on first use of each larger shape.
	if dt == tensor.F32 {
		if err := b.ensureScratch(int64(n) * 4); err != nil {
			b.free(buf)
			return nil, err
		}
	}
	return &Tensor{dt: dt, shape: append([]int(nil), shape...), n: n, buf: buf}, nil
}

// ensureScratch grows the MatMul scratch to at least n bytes.
func (b *Backend) ensureScratch(n int64) error {
	if b.scratch.Size >= n {
		return nil
	}
	if err := b.s.Synchronize(); err != nil {
		return err
	}
	b.free(b.scratch)
	b.scratch = Buffer{}
	b.epoch++
	buf, err := b.alloc(n, "MatMul activation scratch")
	if err != nil {
		return err
	}
	b.scratch = buf
	return nil
}

// AllocKV implements backend.Backend (F32 pages).
func (b *Backend) AllocKV(pages, pageSize, kvHeads, headDim int) (*backend.KVCache, error) {
	shape := []int{pages, pageSize, kvHeads, headDim}
	n, err := elements("KV cache", shape)
	if err != nil {
		return nil, err
	}
	var kv [2]*Tensor
	for i, what := range []string{"KV cache K", "KV cache V"} {
		buf, err := b.alloc(int64(n)*4, what)
		if err != nil {
			return nil, fmt.Errorf("cuda: %w", err)
		}
		if err := b.s.Memset(buf, 0); err != nil {
			return nil, err
		}
		kv[i] = &Tensor{dt: tensor.F32, shape: shape, n: n, buf: buf, name: what}
	}
	return &backend.KVCache{K: kv[0], V: kv[1], PageSize: pageSize, KVHeads: kvHeads, HeadDim: headDim, TotalPages: pages}, nil
}

// metaInts is the number of int32s the metadata regions take.
func metaInts(capT, capS, capP int) int { return 5*capT + 5*capS + capP + liveInts + pickInts*capT }

// liveInts is the rLive region's int32s: the step's first padding row
// (backend.Step.Live; MaxInt32 without padding), and one more so that
// rPick stays on an 8-byte boundary.
const liveInts = 2

// pickInts is the int32s of one output row's pick settings (rPick): the
// kernel's struct PickParams, 32 bytes on an 8-byte boundary (the caps are
// even, so the region starts on one).
const pickInts = int(unsafe.Sizeof(PickParams{})) / 4

// reg is the device address of metadata region i.
func (b *Backend) reg(i int) uint64 { return b.meta.Ptr + uint64(b.regionOff(i))*4 }

const (
	rTokens = iota
	rPos
	rRowSeq
	rOutRows
	rRowAdapter // the LoRA adapter id of each row's sequence (LoRAAdd)
	rSeqStart
	rSeqLen
	rSeqPos
	rSeqSlot
	rPageOff
	rPages
	rLive // the first padding row (RouterTopK routes rows from it nowhere)
	rPick // per output row: the pick's settings (PickParams)
)

// SetStep implements backend.Backend: the step's layout is checked and
// copied to the device.
func (b *Backend) SetStep(s *backend.Step) error {
	if s == nil {
		return errors.New("cuda: nil step")
	}
	T := len(s.Tokens)
	if len(s.Pos) != T {
		return fmt.Errorf("cuda: step has %d positions for %d tokens", len(s.Pos), T)
	}
	if cap(b.rowSeq) < T {
		b.rowSeq = make([]int32, T)
	}
	b.rowSeq = b.rowSeq[:T]
	if err := backend.CheckStepRows(s, b.rowSeq); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	P := 0
	for i, q := range s.Seqs {
		if q.Slot < 0 {
			return fmt.Errorf("cuda: step sequence %d has slot %d", i, q.Slot)
		}
		P += len(q.Pages)
	}
	for _, r := range s.OutRows {
		if r < 0 || int(r) >= T {
			return fmt.Errorf("cuda: step output row %d outside [0,%d)", r, T)
		}
	}
	if err := b.s.Synchronize(); err != nil { // the staging buffer may still be read
		return err
	}
	if err := b.ensureMeta(max(T, len(s.OutRows)), len(s.Seqs)+1, P); err != nil {
		return err
	}
	h := HostSlice[int32](b.metaHost)
	put := func(r int, v []int32) { copy(h[b.regionOff(r):], v) }
	put(rTokens, s.Tokens)
	put(rPos, s.Pos)
	put(rRowSeq, b.rowSeq)
	put(rOutRows, s.OutRows)
	ad := h[b.regionOff(rRowAdapter):][:T]
	clear(ad)
	for _, q := range s.Seqs {
		for r := q.Start; r < q.Start+q.Len; r++ {
			ad[r] = int32(q.Adapter)
		}
	}
	off := 0
	for i, q := range s.Seqs {
		h[b.regionOff(rSeqStart)+i] = int32(q.Start)
		h[b.regionOff(rSeqLen)+i] = int32(q.Len)
		h[b.regionOff(rSeqPos)+i] = int32(q.Pos)
		h[b.regionOff(rSeqSlot)+i] = int32(q.Slot)
		h[b.regionOff(rPageOff)+i] = int32(off)
		copy(h[b.regionOff(rPages)+off:], q.Pages)
		off += len(q.Pages)
	}
	b.nPages = P
	live := int32(math.MaxInt32)
	if s.Live > 0 {
		live = int32(s.Live)
	}
	h[b.regionOff(rLive)] = live
	putPicks(h[b.regionOff(rPick):][:pickInts*len(s.OutRows)], s.Draws)
	if err := b.s.CopyHtoD(b.meta, b.metaHost, 0, b.metaHost.Size); err != nil {
		return err
	}
	b.step = s
	return nil
}

func (b *Backend) regionOff(i int) int {
	switch {
	case i < 5:
		return i * b.capT
	case i < 10:
		return 5*b.capT + (i-5)*b.capS
	case i == rPages:
		return 5*b.capT + 5*b.capS
	case i == rLive:
		return 5*b.capT + 5*b.capS + b.capP
	}
	return 5*b.capT + 5*b.capS + b.capP + liveInts
}

// ensureMeta grows the metadata buffers (doubling) to hold t rows, s
// sequences and p pages.
func (b *Backend) ensureMeta(t, s, p int) error {
	if b.metaHost != nil && t <= b.capT && s <= b.capS && p <= b.capP {
		return nil
	}
	grow := func(have, want, floor int) int {
		if want <= have {
			return have
		}
		return (max(want, 2*have, floor) + 1) &^ 1 // even: rPick's 8-byte alignment
	}
	ct, cs, cp := grow(b.capT, t, 256), grow(b.capS, s, 16), grow(b.capP, p, 1024)
	n := int64(metaInts(ct, cs, cp)) * 4
	host, err := b.d.AllocHost(n)
	if err != nil {
		return err
	}
	dev, err := b.alloc(n, "step metadata")
	if err != nil {
		host.Free()
		return err
	}
	if b.metaHost != nil {
		b.metaHost.Free()
	}
	b.free(b.meta)
	b.epoch++
	b.meta, b.metaHost = dev, host
	b.capT, b.capS, b.capP = ct, cs, cp
	return nil
}

// Sync implements backend.Backend.
func (b *Backend) Sync() error {
	err := b.err
	b.err = nil
	if b.closed {
		return err
	}
	if serr := b.s.Synchronize(); err == nil && serr != nil {
		err = fmt.Errorf("cuda: %w", serr)
	}
	return err
}

// Close implements backend.Backend.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.s.Synchronize()
	for _, buf := range b.bufs {
		b.d.Free(buf)
	}
	b.bufs = nil
	if b.metaHost != nil {
		err = errors.Join(err, b.metaHost.Free())
	}
	if b.readHost != nil {
		err = errors.Join(err, b.readHost.Free())
	}
	err = errors.Join(err, b.s.Destroy())
	if b.ownDev {
		err = errors.Join(err, b.d.Close())
	}
	return err
}

// fail records the first error.
func (b *Backend) fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf("cuda: "+format, args...)
	}
}

// check records err (a failed launch) for op.
func (b *Backend) check(op string, err error) bool {
	if err != nil {
		if b.err == nil {
			b.err = fmt.Errorf("cuda: %s: %w", op, err)
		}
		return false
	}
	return true
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

func (b *Backend) ok() bool { return b.err == nil && !b.closed }

func (b *Backend) stepMissing(op string) bool {
	if b.step == nil {
		b.fail("%s: no step set", op)
		return true
	}
	return false
}

// t casts a backend tensor to the CUDA type, recording an error for a
// foreign or nil tensor.
func (b *Backend) t(x backend.Tensor, what string) *Tensor {
	t, isCUDA := x.(*Tensor)
	if !isCUDA || t == nil {
		b.fail("%s: not a cuda tensor", what)
		return nil
	}
	return t
}

// f32 checks that x is an F32 tensor with at least n elements.
func (b *Backend) f32(x backend.Tensor, n int, what string) *Tensor {
	t := b.t(x, what)
	if t == nil {
		return nil
	}
	if b.refuse(backend.CheckF32(what, t.arg(), n)) {
		return nil
	}
	return t
}

// Weight dtype codes of the kernels (common.cuh's WT_F32, WT_BF16, WT_F16).
const (
	wtF32 = iota
	wtBF16
	wtF16
)

// wcode is dt's weight dtype code, false for a dtype the kernels do not read.
func wcode(dt tensor.DType) (int, bool) {
	switch dt {
	case tensor.F32:
		return wtF32, true
	case tensor.BF16:
		return wtBF16, true
	case tensor.F16:
		return wtF16, true
	}
	return 0, false
}

// floatWeight checks a weight of any float dtype with at least n elements.
func (b *Backend) floatWeight(x backend.Tensor, n int, what string) (*Tensor, int) {
	t := b.t(x, what)
	if t == nil {
		return nil, 0
	}
	if b.refuse(backend.CheckFloatWeight(what, t.arg(), n)) {
		return nil, 0
	}
	c, _ := wcode(t.dt)
	return t, c
}

// hostPtrs packs device addresses for upload.
func hostPtrs(p []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&p[0])), len(p)*8)
}

// Capture records the ops fn queues into a CUDA graph instead of running
// them. Run the same ops once eagerly first, so every buffer and cuBLASLt
// plan they need exists (nothing may be allocated or synchronised while
// capturing). A replay reads the step metadata from its fixed device
// buffers, so after SetStep of a step with the same shape (a decode step at
// the next positions) Replay computes that step.
func (b *Backend) Capture(fn func()) (*Graph, error) {
	if err := b.Sync(); err != nil {
		return nil, err
	}
	g, err := b.s.Capture(func() error {
		fn()
		return b.err
	})
	b.err = nil
	return g, err
}

// Replay queues a captured graph on the backend's stream.
func (b *Backend) Replay(g *Graph) {
	if b.ok() {
		b.check("Replay", g.Launch(b.s))
	}
}

// gemmSupported reports whether cuBLASLt takes g (of the given shape),
// asking it once per shape; Gemm refusing a call later is recorded in
// gemmOK by the caller.
func (b *Backend) gemmSupported(shape gemmShape, g GemmArgs) bool {
	if ok, known := b.gemmOK[shape]; known {
		return ok
	}
	ok := b.d.GemmSupported(g) == nil
	b.gemmOK[shape] = ok
	return ok
}

// gemmRefused reports whether cuBLASLt refused shape (not asked yet:
// false).
func (b *Backend) gemmRefused(shape gemmShape) bool {
	ok, known := b.gemmOK[shape]
	return known && !ok
}
