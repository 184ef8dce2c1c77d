package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestNorms(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rows, dim := 3, 16
	eps := float32(1e-6)
	x := make([]float32, rows*dim)
	z := make([]float32, rows*dim)
	w := make([]float32, dim)
	for i := range x {
		x[i], z[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	gated := make([]float32, rows*dim)
	gemma := make([]float32, rows*dim)
	if err := GatedRMSNorm(x, z, w, rows, dim, eps, gated); err != nil {
		t.Fatal(err)
	}
	if err := GemmaRMSNorm(x, w, rows, dim, eps, gemma); err != nil {
		t.Fatal(err)
	}
	wantG := make([]float64, rows*dim)
	wantM := make([]float64, rows*dim)
	for r := 0; r < rows; r++ {
		var ss float64
		for i := 0; i < dim; i++ {
			ss += float64(x[r*dim+i]) * float64(x[r*dim+i])
		}
		inv := 1 / math.Sqrt(ss/float64(dim)+float64(eps))
		for i := 0; i < dim; i++ {
			xn := float64(x[r*dim+i]) * inv
			zz := float64(z[r*dim+i])
			wantG[r*dim+i] = xn * float64(w[i]) * zz / (1 + math.Exp(-zz))
			wantM[r*dim+i] = xn * (1 + float64(w[i]))
		}
	}
	if e, at := maxErr(gated, wantG); e > 1e-6 {
		t.Errorf("gated rmsnorm error %g at %d", e, at)
	}
	if e, at := maxErr(gemma, wantM); e > 1e-6 {
		t.Errorf("gemma rmsnorm error %g at %d", e, at)
	}
	// In place.
	if err := GemmaRMSNorm(x, w, rows, dim, eps, x); err != nil {
		t.Fatal(err)
	}
	for i := range x {
		if x[i] != gemma[i] {
			t.Fatalf("in-place gemma rmsnorm differs at %d", i)
		}
	}
	var l2 = make([]float32, rows*dim)
	if err := L2Normalize(z, rows, dim, 0.5, l2); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < rows; r++ {
		var ss float64
		for i := 0; i < dim; i++ {
			ss += float64(l2[r*dim+i]) * float64(l2[r*dim+i])
		}
		if math.Abs(math.Sqrt(ss)-0.5) > 1e-6 {
			t.Errorf("row %d: l2 norm %g, want 0.5", r, math.Sqrt(ss))
		}
	}
	if err := GatedRMSNorm(x, z, w[:3], rows, dim, eps, gated); err == nil {
		t.Error("short weight accepted")
	}
}
