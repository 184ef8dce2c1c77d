//go:build linux && amd64 && cgo

package ktformat

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/moe/cpuexperts"
)

// FuzzKTUnpermute: decoding never panics on any bytes and shape, and for
// any row-major weights with full-scale rows, encoding to KT's layout and
// decoding again gives them back, under every N_BLOCK.
func FuzzKTUnpermute(f *testing.F) {
	f.Add([]byte{1, 2, 3, 250}, uint8(0), uint8(0), uint8(0), false)
	f.Add([]byte{0x77, 0x19, 0x88, 0x0f}, uint8(4), uint8(29), uint8(1), true)
	f.Add([]byte{127, 0, 129, 3}, uint8(5), uint8(59), uint8(2), false)
	f.Fuzz(func(t *testing.T, data []byte, nsel, ksel, nbsel uint8, int4 bool) {
		bits, kstep, kmax := 8, ktKStep, 60
		if int4 {
			bits, kstep, kmax = 4, 2*ktKStep, 30
		}
		n, k := ktNStep*(1+int(nsel)%6), kstep*(1+int(ksel)%kmax)
		nb := ktNBlocks[int(nbsel)%len(ktNBlocks)]
		ones := make([]float32, n)
		for i := range ones {
			ones[i] = 1
		}
		// raw bytes of any length: an error or a result, never a panic
		if m, err := ktUnpermute(data, ones, n, k, bits, nb); err == nil {
			if back, err := ktPermute(m.Data, n, k, bits, nb); err != nil || !bytes.Equal(back, data) {
				t.Fatalf("decode then encode does not give the bytes back (%v)", err)
			}
		}
		// row-major weights built from data, each row made to reach full scale
		q := make([]byte, ktWeightBytes(n, k, bits))
		for i := range q {
			if len(data) > 0 {
				q[i] = data[i%len(data)]
			}
			if bits == 4 {
				q[i] = byte(clampNibble(q[i]&15) | clampNibble(q[i]>>4)<<4)
			} else if q[i] == 0x80 {
				q[i] = 0x81 // -128 is outside KT's range
			}
		}
		for r := 0; r < n; r++ {
			if bits == 8 {
				q[r*k] = 127
			} else {
				q[r*k/2] = q[r*k/2]&0xf0 | 7
			}
		}
		w, err := ktPermute(q, n, k, bits, nb)
		if err != nil {
			t.Fatal(err)
		}
		m, err := ktUnpermute(w, ones, n, k, bits, nb)
		if err != nil || !bytes.Equal(m.Data, q) {
			t.Fatalf("encode then decode does not give the weights back (%v)", err)
		}
		got, err := ktDetectNBlock(w, ones, n, k, bits)
		if err == nil {
			if m2, err := ktUnpermute(w, ones, n, k, bits, got); err != nil || !bytes.Equal(m2.Data, q) && ktBlockFree(n, k) {
				t.Fatalf("detected N_BLOCK %d (true %d) decodes differently: %v", got, nb, err)
			}
		}
	})
}

// clampNibble maps a signed 4-bit value to -7..7 (KT never writes -8).
func clampNibble(v byte) byte {
	if v == 8 {
		return 9
	}
	return v
}

// FuzzOpenKTDir: a merged KT directory of any bytes is opened and decoded
// or refused, never a panic.
func FuzzOpenKTDir(f *testing.F) {
	seed, err := os.ReadFile("testdata/ktfiles/amxint8/model.safetensors")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte("\x10\x00\x00\x00\x00\x00\x00\x00{}              "))
	f.Fuzz(func(t *testing.T, file []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), file, 0o644); err != nil {
			t.Fatal(err)
		}
		qd, err := OpenKTDir(dir, 128, 128)
		if err != nil {
			return
		}
		defer qd.Close()
		for _, l := range qd.Manifest.Layers {
			for e := 0; e < qd.Manifest.Experts; e++ {
				for pool := 0; pool < qd.Manifest.ThreadpoolCnt; pool++ {
					for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
						qd.Layer(l).Quant(e, pool, p)
					}
				}
			}
		}
	})
}

// BenchmarkKTUnpermute decodes one Qwen3-30B-A3B gate slice (768 x 2048)
// and one DeepSeek-V3 gate slice (2048 x 7168, two K_BLOCKs) from KT's
// layout: the load-time cost per matrix of reading KT's files.
func BenchmarkKTUnpermute(b *testing.B) {
	for _, c := range []struct {
		name       string
		n, k, bits int
	}{{"int8_768x2048", 768, 2048, 8}, {"int4_768x2048", 768, 2048, 4}, {"int8_2048x7168", 2048, 7168, 8}, {"int4_2048x7168", 2048, 7168, 4}} {
		b.Run(c.name, func(b *testing.B) {
			f := ktGen(3, 0, c.n, c.k, false)
			q, s := ktQuantRows(f, c.k, c.n, c.k, c.bits)
			w, err := ktPermute(q, c.n, c.k, c.bits, ktDefaultNBlock(c.bits))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				if _, err := ktUnpermute(w, s, c.n, c.k, c.bits, ktDefaultNBlock(c.bits)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
