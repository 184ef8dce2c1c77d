//go:build linux && amd64 && cgo

package cpuexperts

/*
#include "kt_moe.h"
*/
import "C"

import "unsafe"

// QuantizeRows quantizes rows x cols of f (row stride ld) to int8 (bits 8)
// or packed int4 (bits 4, two per byte, low nibble first) with one scale
// per row (value = q * scale): the per-row quantization the AMXINT8 and
// AMXINT4 methods apply when they convert a checkpoint at load, so that
// weights quantized ahead of time (kt quant) load bit for bit the same.
// It returns the weight bytes and the scales.
func QuantizeRows(f []float32, ld, rows, cols, bits int) (q []byte, scale []float32) {
	scale = make([]float32, rows)
	src := (*C.float)(unsafe.Pointer(&f[0]))
	sp := (*C.float)(unsafe.Pointer(&scale[0]))
	if bits == 8 {
		q = make([]byte, rows*cols)
		C.kt_quant_rows_i8(src, C.int64_t(ld), C.int(rows), C.int(cols), (*C.int8_t)(unsafe.Pointer(&q[0])), sp)
	} else {
		q = make([]byte, rows*cols/2)
		C.kt_quant_rows_i4(src, C.int64_t(ld), C.int(rows), C.int(cols), (*C.uint8_t)(unsafe.Pointer(&q[0])), sp)
	}
	return q, scale
}
