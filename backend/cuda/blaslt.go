//go:build cgo

package cuda

/*
#include "ktcuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/ktserve/kt/tensor"
)

// cuBLASLt and cudaDataType_t constants (cublasLt.h, library_types.h).
const (
	cudaR32F    = 0
	cudaR16F    = 2
	cudaR16BF   = 14
	cudaR8FE4M3 = 28

	cublasCompute32F = 68

	ltDescTransA = 3
	ltDescTransB = 4
	ltPrefMaxWS  = 1
	cublasOpN    = 0
	cublasOpT    = 1

	ltWorkspace = 32 << 20
)

func cudaType(t tensor.DType) (C.int, error) {
	switch t {
	case tensor.BF16:
		return cudaR16BF, nil
	case tensor.F16:
		return cudaR16F, nil
	case tensor.F32:
		return cudaR32F, nil
	case tensor.F8E4M3:
		return cudaR8FE4M3, nil
	}
	return 0, fmt.Errorf("cuda: GEMM does not take %v", t)
}

// CuBLASLtVersion returns the loaded cuBLASLt's version number (e.g.
// 130000 for 13.0.0), or 0 when it is not loaded.
func CuBLASLtVersion() int {
	LoadLibraries()
	return int(C.kt_cublasLtGetVersion())
}

// gemmKey identifies one GEMM shape and type combination; its descriptors
// and chosen algorithm are cached and reused (also inside CUDA graphs).
type gemmKey struct {
	m, n, k, lda, ldb, ldd int
	a, b, d                tensor.DType
	accumulate             bool
}

type gemmPlan struct {
	op         C.cublasLtMatmulDesc_t
	la, lb, ld C.cublasLtMatrixLayout_t
	algo       C.cublasLtMatmulAlgo_t
	ws         int64
}

type blasLt struct {
	d     *Device
	h     C.cublasLtHandle_t
	mu    sync.Mutex
	plans map[gemmKey]*gemmPlan
	ws    map[*Stream]Buffer
}

func newBlasLt(d *Device) (*blasLt, error) {
	b := &blasLt{d: d, plans: map[gemmKey]*gemmPlan{}, ws: map[*Stream]Buffer{}}
	if err := ltErr(C.kt_cublasLtCreate(d.ctx, &b.h), "cublasLtCreate"); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *blasLt) close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.plans {
		p.destroy()
	}
	b.plans = nil
	for _, w := range b.ws {
		b.d.Pool.Free(w)
	}
	b.ws = nil
	return ltErr(C.kt_cublasLtDestroy(b.d.ctx, b.h), "cublasLtDestroy")
}

func (p *gemmPlan) destroy() {
	if p.op != nil {
		C.kt_cublasLtMatmulDescDestroy(p.op)
	}
	for _, l := range []C.cublasLtMatrixLayout_t{p.la, p.lb, p.ld} {
		if l != nil {
			C.kt_cublasLtMatrixLayoutDestroy(l)
		}
	}
}

// GemmArgs describes D[M,N] = A[M,K] · B[N,K]ᵀ (+ D when Accumulate), all
// row-major: A is activations, B a weight in Hugging Face [out, in] layout.
// Leading dimensions of 0 mean dense rows (K, K and N).
type GemmArgs struct {
	M, N, K       int
	A, B, D       Buffer
	AType, BType  tensor.DType // BF16 (F16 also works)
	DType         tensor.DType // BF16 or F32
	LDA, LDB, LDD int
	Accumulate    bool
}

func (g *GemmArgs) normalise() error {
	if g.M <= 0 || g.N <= 0 || g.K <= 0 {
		return fmt.Errorf("cuda: GEMM shape M=%d N=%d K=%d", g.M, g.N, g.K)
	}
	if g.LDA == 0 {
		g.LDA = g.K
	}
	if g.LDB == 0 {
		g.LDB = g.K
	}
	if g.LDD == 0 {
		g.LDD = g.N
	}
	if g.LDA < g.K || g.LDB < g.K || g.LDD < g.N {
		return fmt.Errorf("cuda: GEMM leading dimensions %d/%d/%d below K=%d/N=%d", g.LDA, g.LDB, g.LDD, g.K, g.N)
	}
	need := func(name string, b Buffer, rows, ld, cols int, t tensor.DType) error {
		n := (int64(rows-1)*int64(ld) + int64(cols)) * int64(t.Size())
		if b.Size < n {
			return fmt.Errorf("cuda: GEMM %s needs %d bytes, buffer has %d", name, n, b.Size)
		}
		return nil
	}
	return errors.Join(need("A", g.A, g.M, g.LDA, g.K, g.AType), need("B", g.B, g.N, g.LDB, g.K, g.BType), need("D", g.D, g.M, g.LDD, g.N, g.DType))
}

// Gemm queues D = A·Bᵀ (+D) on s through cuBLASLt with float32 accumulation.
func (d *Device) Gemm(s *Stream, g GemmArgs) error {
	if err := g.normalise(); err != nil {
		return err
	}
	b := d.lt
	b.mu.Lock()
	defer b.mu.Unlock()
	key := gemmKey{g.M, g.N, g.K, g.LDA, g.LDB, g.LDD, g.AType, g.BType, g.DType, g.Accumulate}
	p, ok := b.plans[key]
	if !ok {
		var err error
		if p, err = b.plan(key); err != nil {
			return err
		}
		b.plans[key] = p
	}
	ws, ok := b.ws[s]
	if !ok {
		var err error
		if ws, err = d.Pool.Alloc(ltWorkspace, "cuBLASLt workspace"); err != nil {
			return err
		}
		b.ws[s] = ws
	}
	alpha, beta := C.float(1), C.float(0)
	if g.Accumulate {
		beta = 1
	}
	// In cuBLASLt's column-major view, row-major D[M,N] is Dᶜ[N,M]: it is
	// computed as Bᶜ[K,N]ᵀ · Aᶜ[K,M].
	return ltErr(C.kt_cublasLtMatmul(d.ctx, b.h, p.op, unsafe.Pointer(&alpha),
		C.CUdeviceptr(g.B.Ptr), p.lb, C.CUdeviceptr(g.A.Ptr), p.la, unsafe.Pointer(&beta),
		C.CUdeviceptr(g.D.Ptr), p.ld, C.CUdeviceptr(g.D.Ptr), p.ld,
		&p.algo, C.CUdeviceptr(ws.Ptr), C.size_t(ws.Size), s.s),
		"cublasLtMatmul(M=%d N=%d K=%d %v·%v→%v)", g.M, g.N, g.K, g.AType, g.BType, g.DType)
}

func (b *blasLt) plan(k gemmKey) (*gemmPlan, error) {
	ta, err := cudaType(k.a)
	if err != nil {
		return nil, err
	}
	tb, err := cudaType(k.b)
	if err != nil {
		return nil, err
	}
	td, err := cudaType(k.d)
	if err != nil {
		return nil, err
	}
	p := &gemmPlan{}
	fail := func(err error) (*gemmPlan, error) { p.destroy(); return nil, err }
	if err := ltErr(C.kt_cublasLtMatmulDescCreate(&p.op, cublasCompute32F, cudaR32F), "cublasLtMatmulDescCreate"); err != nil {
		return fail(err)
	}
	opT, opN := C.int(cublasOpT), C.int(cublasOpN)
	if err := ltErr(C.kt_cublasLtMatmulDescSetAttribute(p.op, ltDescTransA, unsafe.Pointer(&opT), 4), "cublasLtMatmulDescSetAttribute(TRANSA)"); err != nil {
		return fail(err)
	}
	if err := ltErr(C.kt_cublasLtMatmulDescSetAttribute(p.op, ltDescTransB, unsafe.Pointer(&opN), 4), "cublasLtMatmulDescSetAttribute(TRANSB)"); err != nil {
		return fail(err)
	}
	// Column-major layouts: weight Bᶜ is [K rows, N cols] with ld LDB,
	// activations Aᶜ [K, M] with ld LDA, output Dᶜ [N, M] with ld LDD.
	if err := ltErr(C.kt_cublasLtMatrixLayoutCreate(&p.lb, tb, C.uint64_t(k.k), C.uint64_t(k.n), C.int64_t(k.ldb)), "cublasLtMatrixLayoutCreate(B)"); err != nil {
		return fail(err)
	}
	if err := ltErr(C.kt_cublasLtMatrixLayoutCreate(&p.la, ta, C.uint64_t(k.k), C.uint64_t(k.m), C.int64_t(k.lda)), "cublasLtMatrixLayoutCreate(A)"); err != nil {
		return fail(err)
	}
	if err := ltErr(C.kt_cublasLtMatrixLayoutCreate(&p.ld, td, C.uint64_t(k.n), C.uint64_t(k.m), C.int64_t(k.ldd)), "cublasLtMatrixLayoutCreate(D)"); err != nil {
		return fail(err)
	}
	var pref C.cublasLtMatmulPreference_t
	if err := ltErr(C.kt_cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate"); err != nil {
		return fail(err)
	}
	defer C.kt_cublasLtMatmulPreferenceDestroy(pref)
	wsz := C.uint64_t(ltWorkspace)
	if err := ltErr(C.kt_cublasLtMatmulPreferenceSetAttribute(pref, ltPrefMaxWS, unsafe.Pointer(&wsz), 8), "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)"); err != nil {
		return fail(err)
	}
	var res C.cublasLtMatmulHeuristicResult_t
	var n C.int
	if err := ltErr(C.kt_cublasLtMatmulAlgoGetHeuristic(b.d.ctx, b.h, p.op, p.lb, p.la, p.ld, p.ld, pref, 1, &res, &n),
		"cublasLtMatmulAlgoGetHeuristic(M=%d N=%d K=%d)", k.m, k.n, k.k); err != nil {
		return fail(err)
	}
	if n == 0 {
		return fail(fmt.Errorf("cuda: cuBLASLt has no algorithm for M=%d N=%d K=%d %v·%v→%v", k.m, k.n, k.k, k.a, k.b, k.d))
	}
	p.algo = res.algo
	p.ws = int64(res.workspaceSize)
	return p, nil
}

// GemmSupported reports (as an error naming the shape) whether cuBLASLt has
// an algorithm for g's shape and types, caching the plan Gemm then uses.
// Nothing is queued.
func (d *Device) GemmSupported(g GemmArgs) error {
	if err := g.normalise(); err != nil {
		return err
	}
	b := d.lt
	b.mu.Lock()
	defer b.mu.Unlock()
	key := gemmKey{g.M, g.N, g.K, g.LDA, g.LDB, g.LDD, g.AType, g.BType, g.DType, g.Accumulate}
	if _, ok := b.plans[key]; ok {
		return nil
	}
	p, err := b.plan(key)
	if err != nil {
		return err
	}
	b.plans[key] = p
	return nil
}
