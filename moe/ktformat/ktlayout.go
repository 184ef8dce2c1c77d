//go:build linux && amd64 && cgo

package ktformat

/*
#include <stdint.h>
void kt_ktlayout_unpermute(const uint8_t* w, int n, int k, int bits, int nblock, int kblock, uint8_t* out, int32_t* rowmax);
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/ktserve/kt/moe/cpuexperts"
)

// KTransformers' AMXINT8 / AMXINT4 CPU expert files hold the raw bytes of
// its BufferB objects (kt-kernel/operators/amx/la/amx_kernels.hpp,
// GemmKernel224Int8::BufferB, and la/amx_buffers.hpp, BufferBInt4Impl): the
// weights of an n x k matrix (n output rows, k inputs) tiled for AMX,
// followed by n float32 scales in row order. The tiling:
//
//   - rows are cut into N_BLOCK blocks (n_block_begin, n_block_size =
//     min(N_BLOCK, n - n_block_begin)), columns into K_BLOCK blocks;
//   - a block is stored k-block by k-block; within one, N_STEP = 32 rows by
//     K_STEP = 64 columns (int8) or B_K_STEP = 128 columns (int4) form a
//     2048-byte panel at element offset n_block_begin*k +
//     k_block_begin*n_block_size + n_begin*k_block_size + k_begin*N_STEP
//     (halved for int4);
//   - in a panel, row i's 64 bytes were written at i*64 and each 16-row
//     half was then transposed as a 16x16 matrix of 4-byte words
//     (transpose_16x16_32bit), so byte j of row i lies at
//     (i/16)*1024 + (j/4)*64 + (i%16)*4 + j%4: the VNNI layout of an AMX B tile;
//   - int4: byte j of a row's 64 holds column k_begin+j in its low nibble and
//     column k_begin+64+j in its high nibble, both signed 4-bit.
//
// Scales: int8 value = q * scale (scale = amax/127, per row); int4 value =
// (q*16) * scale (scale = amax/112, per row).
//
// N_BLOCK is a compile-time constant of the KT release that wrote the file
// and is recorded nowhere in it; it matters only when k > K_BLOCK and
// n > 64. kt tries each N_BLOCK KT has used and keeps the one under which
// every row reaches full scale (|q| = 127 or 7 somewhere), which every row
// KT quantizes does; see ktDetectNBlock.
const (
	ktKBlock = 3584 // K_BLOCK of GemmKernel224Int8/Int4 in every stored KT release
	ktNStep  = 32   // N_STEP = 2 * TILE_N
	ktKStep  = 64   // K_STEP = TILE_K
)

// ktNBlocks are the N_BLOCK values KT's GemmKernel224Int8/Int4 have used,
// newest first per method (see ktDefaultNBlock).
var ktNBlocks = []int{64, 128, 256}

// ktDefaultNBlock is N_BLOCK at kvcache-ai/ktransformers 0d2168a2 (and
// cd795550): 64 for GemmKernel224Int8, 128 for GemmKernel224Int4.
func ktDefaultNBlock(bits int) int {
	if bits == 4 {
		return 128
	}
	return 64
}

// errKTFullScale reports a row that does not reach full scale under a layout.
var errKTFullScale = errors.New("row does not reach full scale")

// ktWeightBytes is the size of an n x k BufferB weight image (scales excluded).
func ktWeightBytes(n, k, bits int) int { return n * k * bits / 8 }

// ktCheckShape reports whether KT's BufferB accepts an n x k matrix.
func ktCheckShape(n, k, bits int) error {
	kstep := ktKStep
	if bits == 4 {
		kstep = 2 * ktKStep
	}
	if n <= 0 || k <= 0 || n%ktNStep != 0 || k%kstep != 0 {
		return fmt.Errorf("a %d x %d matrix does not fit KT's int%d tiling (rows a multiple of %d, columns of %d)", n, k, bits, ktNStep, kstep)
	}
	return nil
}

// ktBlockFree reports whether the layout of an n x k matrix is the same for
// every N_BLOCK KT has used (one k block, or no more rows than the smallest N_BLOCK).
func ktBlockFree(n, k int) bool { return k <= ktKBlock || n <= ktNBlocks[0] }

// ktUnpermute decodes KT's BufferB weight image w of an n x k matrix
// (written with N_BLOCK nblock) and its n scales into kt's row-major
// QuantMatrix (int8, or int4 packed low nibble first, with value = q *
// Scale). It checks that every row with a positive normal scale reaches
// full scale, as every row KT quantizes does; a row that does not is
// errKTFullScale (wrapped with the row).
func ktUnpermute(w []byte, scale []float32, n, k, bits, nblock int) (cpuexperts.QuantMatrix, error) {
	if bits != 8 && bits != 4 {
		return cpuexperts.QuantMatrix{}, fmt.Errorf("int%d: KT writes int8 or int4", bits)
	}
	if err := ktCheckShape(n, k, bits); err != nil {
		return cpuexperts.QuantMatrix{}, err
	}
	if nblock <= 0 || nblock%ktNStep != 0 {
		return cpuexperts.QuantMatrix{}, fmt.Errorf("N_BLOCK %d is not a positive multiple of %d", nblock, ktNStep)
	}
	if len(w) != ktWeightBytes(n, k, bits) {
		return cpuexperts.QuantMatrix{}, fmt.Errorf("%d weight bytes, want %d for int%d [%d %d]", len(w), ktWeightBytes(n, k, bits), bits, n, k)
	}
	if len(scale) != n {
		return cpuexperts.QuantMatrix{}, fmt.Errorf("%d scales, want one per row (%d)", len(scale), n)
	}
	out := make([]byte, ktWeightBytes(n, k, bits))
	rowMax := make([]int32, n)
	C.kt_ktlayout_unpermute((*C.uint8_t)(unsafe.Pointer(&w[0])), C.int(n), C.int(k), C.int(bits), C.int(nblock), C.int(ktKBlock),
		(*C.uint8_t)(unsafe.Pointer(&out[0])), (*C.int32_t)(unsafe.Pointer(&rowMax[0])))
	full := 127
	sc := make([]float32, n)
	copy(sc, scale)
	if bits == 4 {
		full = 7
		for i := range sc {
			sc[i] *= 16
		}
	}
	for r, s := range scale {
		switch {
		case math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) || s < 0:
			return cpuexperts.QuantMatrix{}, fmt.Errorf("row %d: scale %g is not a finite non-negative number", r, s)
		case s == 0 && rowMax[r] != 0:
			return cpuexperts.QuantMatrix{}, fmt.Errorf("row %d: scale 0 with nonzero weights", r)
		case s >= 0x1p-100 && int(rowMax[r]) != full:
			return cpuexperts.QuantMatrix{}, fmt.Errorf("row %d: largest |q| is %d, not %d: %w", r, rowMax[r], full, errKTFullScale)
		}
	}
	return cpuexperts.QuantMatrix{Bits: bits, Rows: n, Cols: k, Data: out, Scale: sc}, nil
}

// abs4 is the magnitude of a signed 4-bit value given as 0..15.
func abs4(v int) int {
	if v >= 8 {
		return 16 - v
	}
	return v
}

// ktDetectNBlock picks the N_BLOCK under which the BufferB image w of an
// n x k matrix decodes with every row at full scale. When the layout does
// not depend on N_BLOCK it returns the newest release's value; when
// several values fit (rows with many full-scale weights can leave it open)
// it assumes the newest release's value if that is one of them, and refuses
// otherwise.
func ktDetectNBlock(w []byte, scale []float32, n, k, bits int) (int, error) {
	if ktBlockFree(n, k) {
		if _, err := ktUnpermute(w, scale, n, k, bits, ktDefaultNBlock(bits)); err != nil {
			return 0, err
		}
		return ktDefaultNBlock(bits), nil
	}
	var fits []int
	var firstErr error
	for _, nb := range ktNBlocks {
		_, err := ktUnpermute(w, scale, n, k, bits, nb)
		switch {
		case err == nil:
			fits = append(fits, nb)
		case !errors.Is(err, errKTFullScale):
			return 0, err
		case firstErr == nil:
			firstErr = err
		}
	}
	switch {
	case len(fits) > 1 && slices.Contains(fits, ktDefaultNBlock(bits)):
		// the file cannot tell: assume the newest release's N_BLOCK
		return ktDefaultNBlock(bits), nil
	case len(fits) == 0:
		return 0, fmt.Errorf("no KT layout version (N_BLOCK %v, K_BLOCK %d) decodes it with every row at full scale (N_BLOCK %d: %v): not a KT AMX file, corrupt, or written by a KT release kt does not know",
			ktNBlocks, ktKBlock, ktNBlocks[0], firstErr)
	case len(fits) == 1:
		return fits[0], nil
	}
	return 0, fmt.Errorf("several KT layout versions (N_BLOCK %v) decode it with every row at full scale; kt cannot tell which release wrote it", fits)
}

// ktPermute is the inverse of ktUnpermute: it lays out kt's row-major q
// (int8, or int4 packed low nibble first) as KT's BufferB weight image with
// N_BLOCK nblock.
func ktPermute(q []byte, n, k, bits, nblock int) ([]byte, error) {
	if err := ktCheckShape(n, k, bits); err != nil {
		return nil, err
	}
	if len(q) != ktWeightBytes(n, k, bits) {
		return nil, fmt.Errorf("%d bytes, want %d for int%d [%d %d]", len(q), ktWeightBytes(n, k, bits), bits, n, k)
	}
	w := make([]byte, len(q))
	kstep := ktKStep
	if bits == 4 {
		kstep = 2 * ktKStep
	}
	for nb0 := 0; nb0 < n; nb0 += nblock {
		nbs := min(nblock, n-nb0)
		for kb0 := 0; kb0 < k; kb0 += ktKBlock {
			kbs := min(ktKBlock, k-kb0)
			for nBegin := 0; nBegin < nbs; nBegin += ktNStep {
				for kBegin := 0; kBegin < kbs; kBegin += kstep {
					base := (nb0*k + kb0*nbs + nBegin*kbs + kBegin*ktNStep) * bits / 8
					panel := w[base : base+ktNStep*64]
					for i := 0; i < ktNStep; i++ {
						row := nb0 + nBegin + i
						dst := (i/16)*1024 + (i%16)*4
						col := kb0 + kBegin
						for j := 0; j < 64; j++ {
							var b byte
							if bits == 8 {
								b = q[row*k+col+j]
							} else {
								lo := nibble(q, row*k+col+j)
								hi := nibble(q, row*k+col+64+j)
								b = lo | hi<<4
							}
							panel[dst+(j/4)*64+j%4] = b
						}
					}
				}
			}
		}
	}
	return w, nil
}

// nibble returns element e of low-nibble-first packed int4 data.
func nibble(q []byte, e int) byte {
	return (q[e/2] >> (4 * (e & 1))) & 15
}

// ktQuantRows quantizes rows x cols of f (row stride ld) per row as KT's
// BufferB::from_mat does and returns kt's row-major form (int8, or int4
// packed low nibble first) with KT's scales: int8 q = rne(v / (amax/127));
// int4 x = rne(v / (amax/112)) then q = sign(x) * ((|x| + 8) >> 4), scale
// amax/112 (the file's; the value is q*16*scale). For int8 this is kt's own
// rule; for int4 it rounds |v|/(amax/7) fractions in [0.469, 0.5] up where
// kt's round-to-even rounds down (about 3% of weights on random data).
func ktQuantRows(f []float32, ld, rows, cols, bits int) ([]byte, []float32) {
	q := make([]byte, ktWeightBytes(rows, cols, bits))
	sc := make([]float32, rows)
	div := 127.0
	if bits == 4 {
		div = 112
	}
	for r := 0; r < rows; r++ {
		row := f[r*ld : r*ld+cols]
		var amax float32
		for _, v := range row {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := float32(float64(amax) / div) // KT divides in double for int4; the same float either way
		var id float32
		if d != 0 {
			id = 1 / d
		}
		for c, v := range row {
			x := int(math.RoundToEven(float64(v * id)))
			x = max(-128, min(127, x)) // _mm512_cvtsepi32_epi8 saturates
			if bits == 8 {
				q[r*cols+c] = byte(int8(x))
				continue
			}
			a := x
			if a < 0 {
				a = -a
			}
			a = (a + 8) >> 4
			if x < 0 {
				a = -a
			}
			q[(r*cols+c)/2] |= byte(a&15) << (4 * (c & 1))
		}
		sc[r] = d
	}
	return q, sc
}

// ktQuantSlice quantizes a slice with KT's rules and returns the BufferB
// weight image (newest release's N_BLOCK) and the scales' bytes.
func ktQuantSlice(f []float32, ld, rows, cols, bits int) ([]byte, []byte, error) {
	q, sc := ktQuantRows(f, ld, rows, cols, bits)
	w, err := ktPermute(q, rows, cols, bits, ktDefaultNBlock(bits))
	if err != nil {
		return nil, nil, err
	}
	s := make([]byte, 4*len(sc))
	for i, v := range sc {
		u := math.Float32bits(v)
		s[4*i], s[4*i+1], s[4*i+2], s[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return w, s, nil
}
