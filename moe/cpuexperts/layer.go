//go:build linux && amd64 && cgo

package cpuexperts

/*
#include <stdlib.h>
#include "kt_moe.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/ktserve/kt/tensor"
)

// Layer holds the routed experts of one MoE layer, split across the engine's
// pools, and the GPU-expert skip mask.
type Layer struct {
	e      *Engine
	spec   LayerSpec
	c      *C.kt_layer
	ex     []C.kt_expert // C memory, [pools][experts]
	skip   []byte        // C memory, [experts]
	allocs []region      // packed weights, one per pool
	cmem   []unsafe.Pointer
	pin    runtime.Pinner // in-place checkpoint weights
	fmt    int
}

type region struct {
	p     unsafe.Pointer
	bytes int64
}

func (s *LayerSpec) validate(e *Engine) error {
	if s.GroupSize == 0 {
		s.GroupSize = 128
		if s.Method == RAWINT4 {
			s.GroupSize = 32 // Kimi-K2-Thinking's
		}
	}
	if _, err := ParseMethod(string(s.Method)); err != nil {
		return err
	}
	c := e.cfg
	if s.Experts != c.Experts || s.Hidden != c.Hidden || s.Intermediate != c.Intermediate {
		return fmt.Errorf("layer shape (experts %d, hidden %d, intermediate %d) differs from the engine's (%d, %d, %d)",
			s.Experts, s.Hidden, s.Intermediate, c.Experts, c.Hidden, c.Intermediate)
	}
	if err := CheckShape(s.Method, s.Hidden, s.Intermediate, c.Pools); err != nil {
		return err
	}
	if s.Method == INT4KGroup && s.GroupSize != 64 && s.GroupSize != 128 {
		return fmt.Errorf("INT4_KGROUP group size %d: must be 64 or 128", s.GroupSize)
	}
	if s.Method == RAWINT4 && s.GroupSize != 32 && s.GroupSize != 64 && s.GroupSize != 128 {
		return fmt.Errorf("RAWINT4: the checkpoint's INT4 groups of %d columns: the engine runs groups of 32, 64 or 128 (AMXINT4 or AMXINT8 convert other groups)", s.GroupSize)
	}
	return nil
}

func (l *Layer) fmtOf() int {
	switch l.spec.Method {
	case BF16:
		return C.KT_FMT_BF16_RM
	case FP8:
		return C.KT_FMT_FP8_RM
	case AMXBF16:
		return C.KT_FMT_BF16_PK
	case AMXINT8:
		return C.KT_FMT_I8_PK
	case AMXINT4:
		return C.KT_FMT_I4_PK
	case INT4KGroup, RAWINT4:
		return C.KT_FMT_I4G_PK
	}
	return 0
}

// shape of projection p in a pool: rows n, cols k.
func (l *Layer) shape(p Proj, pool int) (n, k int) {
	ip := l.e.inter[pool]
	if p == Down {
		return l.spec.Hidden, ip
	}
	return ip, l.spec.Hidden
}

// packedSizes returns bytes of weights, scales and corrections for an n x k matrix.
func (l *Layer) packedSizes(n, k int) (w, s, c int64) {
	N, K := int64(n), int64(k)
	switch l.fmt {
	case C.KT_FMT_BF16_PK:
		return N * K * 2, 0, 0
	case C.KT_FMT_I8_PK:
		return N * K, 4 * N, 4 * N
	case C.KT_FMT_I4_PK:
		return N * K / 2, 4 * N, 4 * N
	case C.KT_FMT_I4G_PK: // bf16 scales, no corrections: the kernels take the activations' sums (kt_gsum)
		g := int64(l.spec.GroupSize)
		return N * K / 2, 2 * N * K / g, 0
	}
	return 0, 0, 0
}

func align64(x int64) int64 { return (x + 63) &^ 63 }

func (e *Engine) newLayerShell(spec LayerSpec) (*Layer, error) {
	if e.c == nil {
		return nil, errors.New("cpu expert engine is closed")
	}
	if err := spec.validate(e); err != nil {
		return nil, err
	}
	l := &Layer{e: e, spec: spec}
	l.fmt = l.fmtOf()
	pools := e.cfg.Pools
	cl := (*C.kt_layer)(C.calloc(1, C.size_t(unsafe.Sizeof(C.kt_layer{}))))
	exp := C.calloc(C.size_t(pools*spec.Experts), C.size_t(unsafe.Sizeof(C.kt_expert{})))
	skip := C.calloc(C.size_t(spec.Experts), 1)
	if cl == nil || exp == nil || skip == nil {
		C.free(unsafe.Pointer(cl))
		C.free(exp)
		C.free(skip)
		return nil, errors.New("out of memory for the layer tables")
	}
	l.c = cl
	l.cmem = append(l.cmem, unsafe.Pointer(cl), exp, skip)
	l.ex = unsafe.Slice((*C.kt_expert)(exp), pools*spec.Experts)
	l.skip = unsafe.Slice((*byte)(skip), spec.Experts)
	cl.fmt = C.int(l.fmt)
	cl.nexp = C.int(spec.Experts)
	cl.hidden = C.int(spec.Hidden)
	cl.inter = C.int(spec.Intermediate)
	cl.npools = C.int(pools)
	for p := 0; p < pools; p++ {
		cl.inter_p[p] = C.int(e.inter[p])
	}
	cl.ex = (*C.kt_expert)(exp)
	cl.skip = (*C.uint8_t)(skip)
	runtime.SetFinalizer(l, (*Layer).Close)
	return l, nil
}

func (l *Layer) mat(pool, expert int, p Proj) *C.kt_mat {
	x := &l.ex[pool*l.spec.Experts+expert]
	switch p {
	case Gate:
		return &x.gate
	case Up:
		return &x.up
	}
	return &x.down
}

// allocPacked reserves each pool's region and points every kt_mat into it.
func (l *Layer) allocPacked() error {
	for pool := 0; pool < l.e.cfg.Pools; pool++ {
		var total int64
		for p := Gate; p <= Down; p++ {
			n, k := l.shape(p, pool)
			w, s, c := l.packedSizes(n, k)
			total += align64(w) + align64(s) + align64(c)
		}
		total *= int64(l.spec.Experts)
		ptr := C.kt_alloc(C.int64_t(total), C.int(l.e.bind[pool]))
		if ptr == nil {
			return fmt.Errorf("cannot allocate %d MiB of expert weights for pool %d", total>>20, pool)
		}
		l.allocs = append(l.allocs, region{ptr, total})
		off := int64(0)
		for x := 0; x < l.spec.Experts; x++ {
			for p := Gate; p <= Down; p++ {
				n, k := l.shape(p, pool)
				w, s, c := l.packedSizes(n, k)
				m := l.mat(pool, x, p)
				m.w = (*C.uint8_t)(unsafe.Add(ptr, off))
				off += align64(w)
				switch {
				case s > 0 && l.fmt == C.KT_FMT_I4G_PK:
					m.gscale = (*C.uint16_t)(unsafe.Add(ptr, off))
					off += align64(s)
				case s > 0:
					m.scale = (*C.float)(unsafe.Add(ptr, off))
					off += align64(s)
				}
				if c > 0 {
					m.corr = (*C.int32_t)(unsafe.Add(ptr, off))
					off += align64(c)
				}
				m.n, m.k, m.ld = C.int(n), C.int(k), C.int64_t(k)
				m.group = C.int(l.spec.GroupSize)
			}
		}
	}
	return nil
}

// NewLayer builds a layer from full HF matrices. BF16 and FP8 keep pointers
// into the source's memory (which must stay mapped and unchanged while the
// layer lives); the other methods repack, in parallel over experts.
func (e *Engine) NewLayer(spec LayerSpec, src Source) (*Layer, error) {
	l, err := e.newLayerShell(spec)
	if err != nil {
		return nil, err
	}
	if err := l.load(src); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Layer) checkMatrix(x int, p Proj, m Matrix) error {
	rows, cols := l.spec.Intermediate, l.spec.Hidden
	if p == Down {
		rows, cols = cols, rows
	}
	where := fmt.Sprintf("expert %d %s_proj", x, p)
	if err := m.Check(rows, cols); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	converts := []tensor.DType{tensor.BF16, tensor.F32, tensor.F8E4M3}
	switch method := l.spec.Method; {
	case method == RAWINT4 && !m.PackedInt4():
		return fmt.Errorf("%s: %s: RAWINT4 runs the codes of a pack-quantized INT4 checkpoint (compressed-tensors); this one's experts are %s: use AMXINT4, INT4_KGROUP or AMXINT8", where, m.DType, m.DType)
	case method == RAWINT4 && m.Int4Group != l.spec.GroupSize:
		return fmt.Errorf("%s: INT4 groups of %d columns, the layer's are %d", where, m.Int4Group, l.spec.GroupSize)
	case method == RAWINT4:
	case m.PackedInt4() && method.InPlace():
		return fmt.Errorf("%s: pack-quantized INT4 cannot be used by method %s in place: run it with RAWINT4 (its own codes) or convert it with AMXINT4, AMXINT8 or AMXBF16", where, method)
	case m.PackedInt4():
	case method == BF16 && m.DType != tensor.BF16, method == FP8 && m.DType != tensor.F8E4M3, !method.InPlace() && !slices.Contains(converts, m.DType):
		return fmt.Errorf("%s: dtype %s cannot be used by method %s", where, m.DType, method)
	}
	return nil
}

func (l *Layer) load(src Source) error {
	if l.spec.Method.InPlace() {
		return l.loadInPlace(src)
	}
	if err := l.allocPacked(); err != nil {
		return err
	}
	return ParallelExperts(l.spec.Experts, func(x int, buf *[]float32) error {
		for p := Gate; p <= Down; p++ {
			m, err := src.Matrix(x, p)
			if err != nil {
				return fmt.Errorf("expert %d %s_proj: %w", x, p, err)
			}
			if err := l.checkMatrix(x, p, m); err != nil {
				return err
			}
			if l.spec.Method == RAWINT4 {
				for pool := 0; pool < l.e.cfg.Pools; pool++ {
					l.packCodes(pool, x, p, m)
				}
				continue
			}
			f := m.ToF32(buf)
			for pool := 0; pool < l.e.cfg.Pools; pool++ {
				l.packF32(pool, x, p, f, m.Cols)
			}
		}
		return nil
	})
}

// packF32 packs pool's slice of the f32 matrix f (row stride ld) into place.
func (l *Layer) packF32(pool, x int, p Proj, f []float32, ld int) {
	i0 := l.poolStart(pool)
	start := i0 * ld // gate/up: rows i0..
	if p == Down {
		start = i0 // down: columns i0..
	}
	src := (*C.float)(unsafe.Pointer(&f[start]))
	m := l.mat(pool, x, p)
	n, k := m.n, m.k
	switch l.fmt {
	case C.KT_FMT_BF16_PK:
		C.kt_pack_bf16(src, C.int64_t(ld), n, k, (*C.uint16_t)(unsafe.Pointer(m.w)))
	case C.KT_FMT_I8_PK:
		C.kt_pack_i8(src, C.int64_t(ld), n, k, (*C.int8_t)(unsafe.Pointer(m.w)), m.scale, m.corr)
	case C.KT_FMT_I4_PK:
		C.kt_pack_i4(src, C.int64_t(ld), n, k, m.w, m.scale, m.corr)
	case C.KT_FMT_I4G_PK:
		C.kt_pack_i4g(src, C.int64_t(ld), n, k, m.group, m.w, m.gscale)
	}
}

// poolStart is the first intermediate row (gate, up) or column (down) of
// pool's slice.
func (l *Layer) poolStart(pool int) int {
	i0 := 0
	for q := 0; q < pool; q++ {
		i0 += l.e.inter[q]
	}
	return i0
}

// packCodes packs pool's slice of the pack-quantized INT4 matrix m into
// place as it is (RAWINT4).
func (l *Layer) packCodes(pool, x int, p Proj, m Matrix) {
	words, groups := (m.Cols+7)/8, (m.Cols+m.Int4Group-1)/m.Int4Group
	w0, s0 := 0, 0 // gate/up: rows i0.. start at their rows' first word
	if i0 := l.poolStart(pool); p == Down {
		w0, s0 = i0/8, i0/m.Int4Group // down: columns i0.. (multiples of 128)
	} else {
		w0, s0 = i0*words, i0*groups
	}
	cm := l.mat(pool, x, p)
	C.kt_pack_i4g_codes((*C.uint32_t)(unsafe.Pointer(&m.Data[4*w0])), C.int64_t(words),
		(*C.float)(unsafe.Pointer(&m.GroupScale[s0])), C.int64_t(groups), cm.n, cm.k, cm.group, cm.w, cm.gscale)
}

// ToF32 widens m to f32 (applying FP8 block scales, dequantizing packed
// INT4) into *buf, grown as needed, and returns the rows.
func (m Matrix) ToF32(buf *[]float32) []float32 {
	n := m.Rows * m.Cols
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	f := (*buf)[:n]
	if m.PackedInt4() {
		m.DequantInt4(f)
		return f
	}
	switch m.DType {
	case tensor.F32:
		copy(f, unsafe.Slice((*float32)(unsafe.Pointer(&m.Data[0])), n))
	case tensor.BF16:
		C.kt_bf16_to_f32((*C.uint16_t)(unsafe.Pointer(&m.Data[0])), C.int64_t(n), (*C.float)(unsafe.Pointer(&f[0])))
	case tensor.F8E4M3:
		C.kt_fp8_to_f32((*C.uint8_t)(unsafe.Pointer(&m.Data[0])), C.int64_t(n), (*C.float)(unsafe.Pointer(&f[0])))
		bc := (m.Cols + 127) / 128
		for r := 0; r < m.Rows; r++ {
			row := f[r*m.Cols : (r+1)*m.Cols]
			srow := m.BlockScale[(r/128)*bc:]
			for c := range row {
				row[c] *= srow[c/128]
			}
		}
	}
	return f
}

// ParallelExperts runs fn for every expert on GOMAXPROCS goroutines, each with
// its own conversion buffer, and returns the first error.
func ParallelExperts(n int, fn func(x int, buf *[]float32) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []float32
			for x := range next {
				if err := fn(x, &buf); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for x := 0; x < n; x++ {
		next <- x
	}
	close(next)
	wg.Wait()
	return first
}

func (l *Layer) loadInPlace(src Source) error {
	pools := l.e.cfg.Pools
	H, I := l.spec.Hidden, l.spec.Intermediate
	for x := 0; x < l.spec.Experts; x++ {
		for p := Gate; p <= Down; p++ {
			m, err := src.Matrix(x, p)
			if err != nil {
				return fmt.Errorf("expert %d %s_proj: %w", x, p, err)
			}
			if err := l.checkMatrix(x, p, m); err != nil {
				return err
			}
			l.pin.Pin(&m.Data[0])
			var scale unsafe.Pointer
			if m.DType == tensor.F8E4M3 {
				scale = C.malloc(C.size_t(4 * len(m.BlockScale)))
				if scale == nil {
					return errors.New("out of memory for fp8 scales")
				}
				l.cmem = append(l.cmem, scale)
				copy(unsafe.Slice((*float32)(scale), len(m.BlockScale)), m.BlockScale)
			}
			es := m.DType.Size()
			i0 := 0
			for pool := 0; pool < pools; pool++ {
				ip := l.e.inter[pool]
				cm := l.mat(pool, x, p)
				cm.scale = (*C.float)(scale)
				if p == Down {
					cm.w = (*C.uint8_t)(unsafe.Pointer(&m.Data[i0*es]))
					cm.ld, cm.n, cm.k = C.int64_t(I), C.int(H), C.int(ip)
					cm.row0, cm.col0, cm.sld = 0, C.int(i0), C.int64_t((I+127)/128)
				} else {
					cm.w = (*C.uint8_t)(unsafe.Pointer(&m.Data[i0*H*es]))
					cm.ld, cm.n, cm.k = C.int64_t(H), C.int(ip), C.int(H)
					cm.row0, cm.col0, cm.sld = C.int(i0), 0, C.int64_t((H+127)/128)
				}
				i0 += ip
			}
		}
	}
	return nil
}

// NewLayerQuant builds an AMXINT8 or AMXINT4 layer from kt quant's per-pool
// slices. It refuses weights converted for a different pool count.
func (e *Engine) NewLayerQuant(spec LayerSpec, src QuantSource) (*Layer, error) {
	if spec.Method != AMXINT8 && spec.Method != AMXINT4 {
		return nil, fmt.Errorf("pre-quantized weights need method AMXINT8 or AMXINT4, not %s", spec.Method)
	}
	if src.Pools() != e.cfg.Pools {
		return nil, fmt.Errorf("weights were converted for %d thread pools but the engine has %d: convert again with --threadpool-count %d, or run with --kt-threadpool-count %d",
			src.Pools(), e.cfg.Pools, e.cfg.Pools, src.Pools())
	}
	l, err := e.newLayerShell(spec)
	if err != nil {
		return nil, err
	}
	if err := l.allocPacked(); err != nil {
		l.Close()
		return nil, err
	}
	bits := 8
	if spec.Method == AMXINT4 {
		bits = 4
	}
	err = ParallelExperts(spec.Experts, func(x int, _ *[]float32) error {
		for pool := 0; pool < e.cfg.Pools; pool++ {
			for p := Gate; p <= Down; p++ {
				q, err := src.Quant(x, pool, p)
				where := fmt.Sprintf("expert %d pool %d %s", x, pool, p)
				if err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
				n, k := l.shape(p, pool)
				if q.Bits != bits || q.Rows != n || q.Cols != k {
					return fmt.Errorf("%s: int%d [%d %d], want int%d [%d %d]", where, q.Bits, q.Rows, q.Cols, bits, n, k)
				}
				if len(q.Data) != n*k*bits/8 || len(q.Scale) != n {
					return fmt.Errorf("%s: %d bytes and %d scales, want %d and %d", where, len(q.Data), len(q.Scale), n*k*bits/8, n)
				}
				m := l.mat(pool, x, p)
				sc := (*C.float)(unsafe.Pointer(&q.Scale[0]))
				if bits == 8 {
					C.kt_pack_q8_rows((*C.int8_t)(unsafe.Pointer(&q.Data[0])), m.n, m.k, (*C.int8_t)(unsafe.Pointer(m.w)), 1, sc, m.scale, m.corr)
				} else {
					C.kt_pack_q4_rows((*C.uint8_t)(unsafe.Pointer(&q.Data[0])), m.n, m.k, m.w, sc, m.scale, m.corr)
				}
			}
		}
		return nil
	})
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Spec returns the layer's method and shapes.
func (l *Layer) Spec() LayerSpec { return l.spec }

// SetSkip sets the skip mask from a bool slice (true = skip).
func (l *Layer) SetSkip(mask []bool) error {
	if len(mask) != len(l.skip) {
		return fmt.Errorf("skip mask has %d entries for %d experts", len(mask), len(l.skip))
	}
	for i, m := range mask {
		l.skip[i] = 0
		if m {
			l.skip[i] = 1
		}
	}
	return nil
}

// WeightBytes is the memory the layer's expert weights occupy (all pools).
func (l *Layer) WeightBytes() int64 {
	var n int64
	for x := 0; x < l.spec.Experts; x++ {
		n += l.ExpertBytes(x)
	}
	return n
}

// ExpertBytes is the bytes read to run expert x once (weights + scales, all pools).
func (l *Layer) ExpertBytes(x int) int64 {
	var n int64
	for pool := 0; pool < l.e.cfg.Pools; pool++ {
		for p := Gate; p <= Down; p++ {
			r, k := l.shape(p, pool)
			if l.spec.Method.InPlace() {
				n += int64(r) * int64(k) * map[Method]int64{BF16: 2, FP8: 1}[l.spec.Method]
				continue
			}
			w, s, c := l.packedSizes(r, k)
			n += w + s + c
		}
	}
	return n
}

// Close frees the layer's memory. Tasks using it must have been synced.
func (l *Layer) Close() {
	if l == nil || l.c == nil {
		return
	}
	runtime.SetFinalizer(l, nil)
	for _, r := range l.allocs {
		C.kt_free(r.p, C.int64_t(r.bytes))
	}
	for _, p := range l.cmem {
		C.free(p)
	}
	l.allocs, l.cmem, l.c, l.ex, l.skip = nil, nil, nil, nil, nil
	l.pin.Unpin()
}

// Engine returns the engine the layer runs on.
func (l *Layer) Engine() *Engine { return l.e }
