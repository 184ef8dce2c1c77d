//go:build !amd64 || !cgo

package cpu

func haveAVX512() bool { return false }

func mmSIMD(x []float32, ldx, n int, w *Tensor, k, o0, o1 int, out []float32, ldo int) bool {
	return false
}

func mmF32SIMD(x []float32, ldx, n int, w []float32, k, rows int, out []float32, ldo int) {
	panic("cpu: mmF32SIMD without SIMD support")
}

func fp8DequantSIMD(q []uint8, cs, dst []float32) {
	panic("cpu: fp8DequantSIMD without SIMD support")
}

func attnSIMD(q, kc, vc []float32, pages []int32, pageSize, kvHeads, hd, heads, npos int, scale float32, scores, out []float32, h0, h1 int) {
	panic("cpu: attnSIMD without SIMD support")
}

func sumSIMD(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += v
	}
	return s
}
