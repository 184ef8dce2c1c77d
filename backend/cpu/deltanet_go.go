//go:build !cgo

package cpu

import (
	"math"

	"github.com/ktserve/kt/backend"
)

// deltaISA is always the portable variant without cgo.
func deltaISA() int { return 0 }

// deltaISAs lists the kernel variants this build can run.
func deltaISAs() []int { return []int{0} }

// deltaGroup runs tokens 0..n-1 of key-head group kh (pure Go kernels, the
// same arithmetic as deltanet_kern.h's portable variant).
func deltaGroup(_ int, sh backend.DeltaShape, st *DeltaState, q, k, v []float32, ldqk, ldv int, g, beta []float32, n, kh, rows0 int, out []float32) {
	var sc deltaScratch
	sc.init(sh)
	rows := rows0
	for t := 0; t < n; t++ {
		deltaRow(q, k, v, ldqk, ldv, g, beta, t, kh, rows, sh, st, out, &sc)
		rows++
		if rows == backend.DeltaChunkSize {
			deltaFlush(kh, rows, sh, st)
			rows = 0
		}
	}
}

// deltaFlushAll folds the first rows open rows of every head into st.S.
func deltaFlushAll(_ int, sh backend.DeltaShape, st *DeltaState, rows int) {
	for kh := 0; kh < sh.KHeads; kh++ {
		deltaFlush(kh, rows, sh, st)
	}
}

// deltaScratch holds one key-head group's per-token temporaries.
type deltaScratch struct {
	qn, kn []float32 // normalised q (scaled) and k, [KDim]
	qs, ks []float32 // qᵀS and kᵀS, [VDim]
	qk, kk []float32 // q·k_j and k·k_j over the open chunk, [DeltaChunkSize]
}

func (sc *deltaScratch) init(sh backend.DeltaShape) {
	buf := make([]float32, 2*sh.KDim+2*sh.VDim+2*backend.DeltaChunkSize)
	sc.qn, buf = buf[:sh.KDim], buf[sh.KDim:]
	sc.kn, buf = buf[:sh.KDim], buf[sh.KDim:]
	sc.qs, buf = buf[:sh.VDim], buf[sh.VDim:]
	sc.ks, buf = buf[:sh.VDim], buf[sh.VDim:]
	sc.qk, buf = buf[:backend.DeltaChunkSize], buf[backend.DeltaChunkSize:]
	sc.kk = buf[:backend.DeltaChunkSize]
}

// deltaRow computes token t of key-head group kh as row i of the open chunk.
func deltaRow(q, k, v []float32, ldqk, ldv int, g, beta []float32, t, kh, i int, sh backend.DeltaShape, st *DeltaState, out []float32, sc *deltaScratch) {
	dk, dv := sh.KDim, sh.VDim
	rep := sh.VHeads / sh.KHeads
	scale := float32(1 / math.Sqrt(float64(dk)))
	base := t*ldqk + kh*dk
	l2Row(q[base:base+dk], scale, sc.qn)
	l2Row(k[base:base+dk], 1, sc.kn)
	// Store the key row, then its dot products with the chunk's keys (j ≤ i).
	copy(st.K[(i*sh.KHeads+kh)*dk:], sc.kn)
	for j := 0; j <= i; j++ {
		kj := st.K[(j*sh.KHeads+kh)*dk : (j*sh.KHeads+kh+1)*dk]
		sc.qk[j] = deltaDot(sc.qn, kj)
		sc.kk[j] = deltaDot(sc.kn, kj)
	}
	for r := 0; r < rep; r++ {
		h := kh*rep + r
		gcol := t*sh.VHeads + h
		gi := g[gcol]
		if i > 0 {
			gi += st.G[(i-1)*sh.VHeads+h]
		}
		st.G[i*sh.VHeads+h] = gi
		b := beta[gcol]
		// One pass over S for both qᵀS and kᵀS.
		s := st.S[h*dk*dv : (h+1)*dk*dv]
		clear(sc.qs)
		clear(sc.ks)
		for d := 0; d < dk; d++ {
			row := s[d*dv : (d+1)*dv]
			deltaAxpy2(sc.qn[d], sc.kn[d], row, sc.qs, sc.ks)
		}
		ei := float32(math.Exp(float64(gi)))
		u := st.V[(i*sh.VHeads+h)*dv : (i*sh.VHeads+h+1)*dv]
		vi := v[t*ldv+h*dv : t*ldv+(h+1)*dv]
		o := out[gcol*dv : (gcol+1)*dv]
		for x := range u {
			u[x] = b * (vi[x] - ei*sc.ks[x])
			o[x] = ei * sc.qs[x]
		}
		for j := 0; j < i; j++ {
			uj := st.V[(j*sh.VHeads+h)*dv : (j*sh.VHeads+h+1)*dv]
			dec := float32(math.Exp(float64(gi - st.G[j*sh.VHeads+h])))
			deltaAxpy(-b*sc.kk[j]*dec, uj, u)
			deltaAxpy(sc.qk[j]*dec, uj, o)
		}
		deltaAxpy(sc.qk[i], u, o)
	}
}

// deltaFlush folds the open chunk's rows of key-head group kh into S.
func deltaFlush(kh, rows int, sh backend.DeltaShape, st *DeltaState) {
	dk, dv := sh.KDim, sh.VDim
	rep := sh.VHeads / sh.KHeads
	var decay [backend.DeltaChunkSize]float32
	for r := 0; r < rep; r++ {
		h := kh*rep + r
		gl := st.G[(rows-1)*sh.VHeads+h]
		el := float32(math.Exp(float64(gl)))
		for j := 0; j < rows; j++ {
			decay[j] = float32(math.Exp(float64(gl - st.G[j*sh.VHeads+h])))
		}
		s := st.S[h*dk*dv : (h+1)*dk*dv]
		for d := 0; d < dk; d++ {
			row := s[d*dv : (d+1)*dv]
			deltaScal(el, row)
			for j := 0; j < rows; j++ {
				kj := st.K[(j*sh.KHeads+kh)*dk+d]
				deltaAxpy(decay[j]*kj, st.V[(j*sh.VHeads+h)*dv:(j*sh.VHeads+h+1)*dv], row)
			}
		}
	}
}

func deltaDot(a, b []float32) float32 {
	var s float32
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

// deltaAxpy2 computes y1 += a1·x and y2 += a2·x in one pass over x.
func deltaAxpy2(a1, a2 float32, x, y1, y2 []float32) {
	y1 = y1[:len(x)]
	y2 = y2[:len(x)]
	for i, v := range x {
		y1[i] += a1 * v
		y2[i] += a2 * v
	}
}
