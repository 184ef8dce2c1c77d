//go:build linux && amd64 && cgo

package cpuexperts

// The C entry points the package's tests reach the kernels by (test files
// cannot use cgo).

/*
#include "kt_moe.h"
int kt_emu_amx_run(int fmt, int m, int k, int nn, int kch, int pf, int pfm, int nxl, int c_nt, int tiled,
                   float* out, double* maxerr);
int kt_emu_amx_i4g_run(int m, int k, int nn, int group, int fused, float* out, double* maxerr);
int64_t kt_amx_emu_calls(void);
int64_t kt_amx_emu_fused_calls(void);
int kt_scale4_errs(const float* x, int n, int vec, float* s9, float* e9);
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// tileLayoutOK reports whether activation rows stored for the AMX kernels
// are read back by their tile addressing (rows of rb bytes; tests).
func tileLayoutOK(rows, rb int) bool { return C.kt_check_tile_layout(C.int(rows), C.int(rb)) == 0 }

// emuAMXRun runs the AMX kernel body over emulated tiles (kern_amx_emu.c;
// needs AVX-512F) for nn weight rows of bf16 (int8 when i8), m tokens and k
// columns of fixed random data; it returns C (m x nn) and the largest error
// relative to a float64 reference.
func emuAMXRun(i8 bool, m, k, nn int, kn amxKnobs) ([]float32, float64, error) {
	fmtc := C.int(C.KT_FMT_BF16_PK)
	if i8 {
		fmtc = C.KT_FMT_I8_PK
	}
	out := make([]float32, m*nn)
	var maxerr C.double
	if C.kt_emu_amx_run(fmtc, C.int(m), C.int(k), C.int(nn), C.int(kn.kch), C.int(kn.pf), C.int(kn.pfm), C.int(kn.nxl),
		b2i(kn.nt), b2i(kn.tiled), (*C.float)(unsafe.Pointer(&out[0])), &maxerr) != 0 {
		return nil, 0, fmt.Errorf("emulated AMX kernel: bad shape m=%d k=%d nn=%d", m, k, nn)
	}
	return out, float64(maxerr), nil
}

// emuAMXI4GRun runs the group-wise int4 AMX kernel (INT4_KGROUP's and
// RAWINT4's panels, requantized to int8 as they are unpacked) over emulated
// tiles (needs AVX-512F and BW) for nn weight rows of k columns in groups of
// group and m tokens of fixed random data, with the unpack fused into the
// tile loop or not; it returns C (m x nn) and the largest error relative to
// a float64 reference over the panels' own int4 values.
func emuAMXI4GRun(m, k, nn, group int, fused bool) ([]float32, float64, error) {
	out := make([]float32, m*nn)
	var maxerr C.double
	if C.kt_emu_amx_i4g_run(C.int(m), C.int(k), C.int(nn), C.int(group), b2i(fused), (*C.float)(unsafe.Pointer(&out[0])), &maxerr) != 0 {
		return nil, 0, fmt.Errorf("emulated group-wise int4 AMX kernel: bad shape m=%d k=%d nn=%d group %d", m, k, nn, group)
	}
	return out, float64(maxerr), nil
}

// emuAMXCalls counts the calls of the emulated AMX kernels the engine runs
// with Config.amxEmu, in all engines of the process so far (tests).
func emuAMXCalls() int64 { return int64(C.kt_amx_emu_calls()) }

// emuAMXFusedCalls counts the calls of the emulated int4 kernel with the
// fused unpack (Config.AMXInt4Fused).
func emuAMXFusedCalls() int64 { return int64(C.kt_amx_emu_fused_calls()) }

// scale4Errs returns the candidate int4 scales kt_pack_i4g weighs for the
// group x and their squared errors: the scalar loop, or (vec) its AVX-512
// form (tests hold them to the same bits; the caller checks the CPU).
func scale4Errs(x []float32, vec bool) (scales, errs []float32) {
	var s9, e9 [9]C.float
	n := int(C.kt_scale4_errs((*C.float)(unsafe.Pointer(&x[0])), C.int(len(x)), b2i(vec), &s9[0], &e9[0]))
	for i := range n {
		scales = append(scales, float32(s9[i]))
		errs = append(errs, float32(e9[i]))
	}
	return scales, errs
}
