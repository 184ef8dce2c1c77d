//go:build linux && amd64 && cgo

package ktformat

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// The files under testdata/ktfiles were written by KT's own packing code
// (see testdata/ktfiles/README.md). ktGen mirrors the driver's generator:
// the same seeded bf16 weights, so kt can quantize them itself and compare.
func ktSplitmix(s *uint64) uint64 {
	*s += 0x9E3779B97F4A7C15
	z := *s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// ktGen returns rows x cols bf16 values as float32 (exact).
func ktGen(seed, id uint64, rows, cols int, sparse bool) []float32 {
	s := seed*1000003 + id
	out := make([]float32, rows*cols)
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			x := ktSplitmix(&s)
			var f float32
			m := int32((x>>40)&0xFFFFFF) - 1<<23
			switch {
			case !sparse:
				f = float32(math.Ldexp(float64(float32(m)/8388608), -(r % 4)))
			case c == (r*7919+13)%cols: // one outlier per row: the row's amax
				f = float32(math.Ldexp(1-2*float64(x&1), -(r % 4)))
			case x&63 == 0: // sparse values of at most half the amax
				f = float32(math.Ldexp(float64(float32(m)/8388608*0.5), -(r % 4)))
			}
			out[r*cols+c] = math.Float32frombits(math.Float32bits(f) &^ 0xffff)
		}
	}
	return out
}

// ktGenSource is the bf16 layer the driver quantized (HF shapes).
type ktGenSource struct {
	spec cpuexperts.LayerSpec
	seed uint64
}

func (s ktGenSource) Matrix(e int, p cpuexperts.Proj) (cpuexperts.Matrix, error) {
	rows, cols := s.spec.Intermediate, s.spec.Hidden
	if p == cpuexperts.Down {
		rows, cols = cols, rows
	}
	f := ktGen(s.seed, uint64(e)*3+uint64(p), rows, cols, false)
	b := make([]byte, 2*len(f))
	for i, v := range f {
		u := math.Float32bits(v) >> 16
		b[2*i], b[2*i+1] = byte(u), byte(u>>8)
	}
	return cpuexperts.Matrix{DType: tensor.BF16, Rows: rows, Cols: cols, Data: b}, nil
}

// poolSlice returns a pool's slice of the full matrix f (HF shape) as a
// sub-matrix start, row stride and shape.
func poolSlice(f []float32, p cpuexperts.Proj, hidden, inter, pools, pool int) ([]float32, int, int, int) {
	ip := inter / pools
	if p == cpuexperts.Down {
		return f[pool*ip:], inter, hidden, ip
	}
	return f[pool*ip*hidden:], hidden, ip, hidden
}

type ktCase struct {
	dir           string
	method        cpuexperts.Method
	hidden, inter int
	seed          uint64
}

var ktCases = []ktCase{
	{"testdata/ktfiles/amxint8", cpuexperts.AMXINT8, 128, 128, 7},
	{"testdata/ktfiles/amxint4", cpuexperts.AMXINT4, 128, 256, 8},
}

// TestKTFiles: KT-made directories load; the decoded weights equal kt's
// own quantization of the same bf16 weights (AMXINT8: bit for bit; AMXINT4:
// equal to KT's rounding rule, within one step of kt's), and so do the
// layer outputs (AMXINT8: bit for bit; AMXINT4: within the stated bound).
func TestKTFiles(t *testing.T) {
	for _, tc := range ktCases {
		t.Run(string(tc.method), func(t *testing.T) {
			qd, err := OpenKTDir(tc.dir, tc.hidden, tc.inter)
			if err != nil {
				t.Fatal(err)
			}
			defer qd.Close()
			m := qd.Manifest
			if m.Format != KTDirFormat || m.Method != tc.method || m.ThreadpoolCnt != 2 || m.Experts != 2 || len(m.Layers) != 1 || m.Layers[0] != 1 {
				t.Fatalf("manifest %+v", m)
			}
			spec := cpuexperts.LayerSpec{Method: tc.method, Experts: 2, Hidden: tc.hidden, Intermediate: tc.inter}
			src := ktGenSource{spec, tc.seed}
			var differ, total int
			for e := 0; e < 2; e++ {
				for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
					full, _ := src.Matrix(e, p)
					f := full.ToF32(new([]float32))
					for pool := 0; pool < 2; pool++ {
						got, err := qd.Layer(1).Quant(e, pool, p)
						if err != nil {
							t.Fatal(err)
						}
						sub, ld, r, c := poolSlice(f, p, tc.hidden, tc.inter, 2, pool)
						bits := map[cpuexperts.Method]int{cpuexperts.AMXINT8: 8, cpuexperts.AMXINT4: 4}[tc.method]
						q, s := quantRows(sub, ld, r, c, bits)
						ks := unsafe.Slice((*float32)(unsafe.Pointer(&s[0])), r)
						for i := range ks {
							if math.Float32bits(ks[i]) != math.Float32bits(got.Scale[i]) {
								t.Fatalf("expert %d %s pool %d row %d: scale %g, kt's %g", e, p, pool, i, got.Scale[i], ks[i])
							}
						}
						if bits == 8 {
							if !bytes.Equal(got.Data, q) {
								t.Fatalf("expert %d %s pool %d: int8 weights differ from kt's quantization", e, p, pool)
							}
							continue
						}
						kq, _ := ktQuantRows(sub, ld, r, c, 4)
						if !bytes.Equal(got.Data, kq) {
							t.Fatalf("expert %d %s pool %d: int4 weights differ from KT's rounding rule", e, p, pool)
						}
						for i := 0; i < r*c; i++ {
							a, b := int(nibble(got.Data, i)), int(nibble(q, i))
							if d := abs4(a) - abs4(b); a != b {
								differ++
								if (a^b)&8 != 0 && a != 0 && b != 0 || d*d != 1 {
									t.Fatalf("element %d: KT %d, kt %d: more than one step apart", i, a, b)
								}
							}
							total++
						}
					}
				}
			}
			if total > 0 {
				frac := float64(differ) / float64(total)
				t.Logf("AMXINT4: %d of %d nibbles (%.2f%%) differ from kt's rounding by one step", differ, total, 100*frac)
				if frac > 0.06 {
					t.Errorf("%.2f%% of nibbles differ; KT's rule differs from round-to-even only for |v/scale| fractions in [0.469, 0.5]", 100*frac)
				}
			}

			// layer output: KT's files vs kt quantizing the same bf16 at load
			e := newEngine(t, spec, 2, 2, 8, 2)
			lk, err := e.NewLayerQuant(spec, qd.Layer(1))
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Close()
			lq, err := e.NewLayer(spec, src)
			if err != nil {
				t.Fatal(err)
			}
			defer lq.Close()
			x, ids, w := cpuexperts.RandomBatch(5, 8, 2, spec.Hidden, spec.Experts)
			a, b := make([]float32, 8*spec.Hidden), make([]float32, 8*spec.Hidden)
			if err := lk.Forward(&cpuexperts.Batch{Tokens: 8, TopK: 2, X: x, IDs: ids, Weights: w, Out: a}); err != nil {
				t.Fatal(err)
			}
			if err := lq.Forward(&cpuexperts.Batch{Tokens: 8, TopK: 2, X: x, IDs: ids, Weights: w, Out: b}); err != nil {
				t.Fatal(err)
			}
			ref, err := cpuexperts.Reference(src, spec, x, 8, 2, ids, w, nil)
			if err != nil {
				t.Fatal(err)
			}
			d := relErr(a, b)
			t.Logf("%s: KT file vs kt quantization: rel diff %.3g; vs f32 reference: KT %.4f, kt %.4f", tc.method, d, relErr(a, ref), relErr(b, ref))
			if tc.method == cpuexperts.AMXINT8 {
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("out[%d]: from KT's file %g, kt-quantized %g", i, a[i], b[i])
					}
				}
			} else if d > 0.1 || relErr(a, ref) > 1.1*relErr(b, ref) {
				t.Errorf("AMXINT4 KT file: rel diff %.3g vs kt, error vs f32 %.4f (kt %.4f)", d, relErr(a, ref), relErr(b, ref))
			}
		})
	}
}

// ktWriteFolder writes a merged KT directory's tensors as the .kt files
// AMX_MOE_TP::write_weights names (convert_cpu_weights.py --no-merge-safetensor).
func ktWriteFolder(t *testing.T, from, to string, method string) {
	t.Helper()
	c, err := safetensors.OpenDir(from)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, name := range c.Names() {
		m := ktKeyRE.FindStringSubmatch(name)
		tn, _ := c.Tensor(name)
		kind := "quant"
		if m[5] == "scale" {
			kind = "scale"
		}
		dir := filepath.Join(to, "_layer_"+m[1], "_numa_"+m[4])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		file := fmt.Sprintf("%s_%s_%s_%dByte_%s_.kt", method, m[2], m[3], len(tn.Data), kind)
		if err := os.WriteFile(filepath.Join(dir, file), tn.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var ktSizeRE = regexp.MustCompile(`_\d+Byte_`)

// TestKTFolderForm: the unmerged .kt files decode like the merged ones.
func TestKTFolderForm(t *testing.T) {
	for _, tc := range ktCases {
		dir := t.TempDir()
		ktWriteFolder(t, tc.dir, dir, map[cpuexperts.Method]string{cpuexperts.AMXINT8: "INT8", cpuexperts.AMXINT4: "INT4"}[tc.method])
		a, err := OpenKTDir(tc.dir, tc.hidden, tc.inter)
		if err != nil {
			t.Fatal(err)
		}
		b, err := OpenKTDir(dir, tc.hidden, tc.inter)
		if err != nil {
			t.Fatal(err)
		}
		if b.Manifest.Method != tc.method || b.Manifest.ThreadpoolCnt != 2 {
			t.Fatalf("folder manifest %+v", b.Manifest)
		}
		for e := 0; e < 2; e++ {
			for pool := 0; pool < 2; pool++ {
				for p := cpuexperts.Gate; p <= cpuexperts.Down; p++ {
					x, err1 := a.Layer(1).Quant(e, pool, p)
					y, err2 := b.Layer(1).Quant(e, pool, p)
					if err1 != nil || err2 != nil || !bytes.Equal(x.Data, y.Data) || fmt.Sprint(x.Scale) != fmt.Sprint(y.Scale) {
						t.Fatalf("%s expert %d pool %d %s: merged and .kt forms differ (%v, %v)", tc.method, e, pool, p, err1, err2)
					}
				}
			}
		}
		if _, err := b.Layer(2).Quant(0, 0, cpuexperts.Gate); err == nil {
			t.Error("a layer the folder lacks decoded")
		}
		// older KT releases named the files without their size
		old := t.TempDir()
		ktWriteFolder(t, tc.dir, old, map[cpuexperts.Method]string{cpuexperts.AMXINT8: "INT8", cpuexperts.AMXINT4: "INT4"}[tc.method])
		paths, _ := filepath.Glob(filepath.Join(old, "_layer_1", "_numa_*", "*.kt"))
		for _, p := range paths {
			np := ktSizeRE.ReplaceAllString(p, "_")
			if err := os.Rename(p, np); err != nil {
				t.Fatal(err)
			}
		}
		c, err := OpenKTDir(old, tc.hidden, tc.inter)
		if err != nil {
			t.Fatalf("size-less .kt names: %v", err)
		}
		if x, err := c.Layer(1).Quant(1, 1, cpuexperts.Down); err != nil || x.Rows != tc.hidden {
			t.Fatalf("size-less .kt names: %v", err)
		}
		c.Close()
		// a truncated .kt file is refused at open
		files, _ := filepath.Glob(filepath.Join(dir, "_layer_1", "_numa_1", "*_up_1_*quant_.kt"))
		if err := os.Truncate(files[0], 100); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenKTDir(dir, tc.hidden, tc.inter); err == nil || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("truncated .kt file: %v", err)
		}
		a.Close()
		b.Close()
	}
}

// TestKTLayoutVersions: single matrices of 160 x 3712 (two K_BLOCKs, two or
// three N_BLOCKs), written by KT's code compiled with the newest release's
// N_BLOCK and with the older 256. kt finds which, decodes them to its own
// quantization of the same weights, and re-encodes them byte for byte.
func TestKTLayoutVersions(t *testing.T) {
	const n, k = 160, 3712
	for _, tc := range []struct {
		file       string
		bits, nb   int
		seed       uint64
		wrongBlock int
	}{
		{"int8_n160_k3712_nb64.kt.gz", 8, 64, 9, 256},
		{"int8_n160_k3712_nb256.kt.gz", 8, 256, 9, 64},
		{"int4_n160_k3712_nb128.kt.gz", 4, 128, 10, 256},
		{"int4_n160_k3712_nb256.kt.gz", 4, 256, 10, 128},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw := gunzip(t, filepath.Join("testdata/ktfiles", tc.file))
			nw := ktWeightBytes(n, k, tc.bits)
			if len(raw) != nw+4*n {
				t.Fatalf("%d bytes, want %d", len(raw), nw+4*n)
			}
			w := raw[:nw]
			sc := make([]float32, n)
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&sc[0])), 4*n), raw[nw:])
			nb, err := ktDetectNBlock(w, sc, n, k, tc.bits)
			if err != nil || nb != tc.nb {
				t.Fatalf("detected N_BLOCK %d (%v), want %d", nb, err, tc.nb)
			}
			if _, err := ktUnpermute(w, sc, n, k, tc.bits, tc.wrongBlock); !errors.Is(err, errKTFullScale) {
				t.Errorf("decoding with N_BLOCK %d: %v, want a full-scale refusal", tc.wrongBlock, err)
			}
			got, err := ktUnpermute(w, sc, n, k, tc.bits, nb)
			if err != nil {
				t.Fatal(err)
			}
			f := ktGen(tc.seed, 0, n, k, true)
			want, ws := quantRows(f, k, n, k, tc.bits)
			if tc.bits == 4 {
				want, _ = ktQuantRows(f, k, n, k, 4)
			}
			if !bytes.Equal(got.Data, want) {
				t.Fatal("decoded weights differ from the quantization of the source")
			}
			kts := unsafe.Slice((*float32)(unsafe.Pointer(&ws[0])), n)
			for i := range kts {
				if math.Float32bits(kts[i]) != math.Float32bits(got.Scale[i]) {
					t.Fatalf("row %d: scale %g, kt's %g", i, got.Scale[i], kts[i])
				}
			}
			back, err := ktPermute(got.Data, n, k, tc.bits, nb)
			if err != nil || !bytes.Equal(back, w) {
				t.Fatalf("re-encoding does not give KT's bytes back (%v)", err)
			}
		})
	}
}

func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ktRewrite copies the KT directory from into a new one, letting edit
// change or drop (nil) each tensor.
func ktRewrite(t *testing.T, from string, edit func(name string, info safetensors.TensorInfo, data []byte) (safetensors.Spec, []byte)) string {
	t.Helper()
	c, err := safetensors.OpenDir(from)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var specs []safetensors.Spec
	var datas [][]byte
	for _, name := range c.Names() {
		tn, _ := c.Tensor(name)
		spec := safetensors.Spec{Name: name, DType: tn.DType, Shape: tn.Shape}
		data := append([]byte(nil), tn.Data...)
		if edit != nil {
			spec, data = edit(name, tn.TensorInfo, data)
		}
		if data == nil {
			continue
		}
		specs = append(specs, spec)
		datas = append(datas, data)
	}
	dir := t.TempDir()
	w, err := safetensors.Create(filepath.Join(dir, "model.safetensors"), specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range datas {
		if _, err := w.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestKTRefusals: directories that do not fit are refused with the tensor named.
func TestKTRefusals(t *testing.T) {
	const src = "testdata/ktfiles/amxint8"
	same := func(name string, info safetensors.TensorInfo, d []byte) safetensors.Spec {
		return safetensors.Spec{Name: name, DType: info.DType, Shape: info.Shape}
	}
	for _, tc := range []struct {
		name          string
		hidden, inter int
		edit          func(string, safetensors.TensorInfo, []byte) (safetensors.Spec, []byte)
		want          string
	}{
		{"missing expert", 128, 128, func(n string, i safetensors.TensorInfo, d []byte) (safetensors.Spec, []byte) {
			if n == "blk.1.ffn_up_exps.1.numa.1.scale" {
				return safetensors.Spec{}, nil
			}
			return same(n, i, d), d
		}, "blk.1.ffn_up_exps.1.numa.1.scale is missing"},
		{"truncated weight", 128, 128, func(n string, i safetensors.TensorInfo, d []byte) (safetensors.Spec, []byte) {
			if n == "blk.1.ffn_down_exps.1.numa.0.weight" {
				return safetensors.Spec{Name: n, DType: i.DType, Shape: []int64{int64(len(d) - 64)}}, d[:len(d)-64]
			}
			return same(n, i, d), d
		}, "blk.1.ffn_down_exps.1.numa.0.weight: 8128 bytes, want 8192"},
		{"kt quant 2-D tensor", 128, 128, func(n string, i safetensors.TensorInfo, d []byte) (safetensors.Spec, []byte) {
			if n == "blk.1.ffn_gate_exps.0.numa.0.weight" {
				return safetensors.Spec{Name: n, DType: i.DType, Shape: []int64{64, 128}}, d
			}
			return same(n, i, d), d
		}, "interrupted kt quant"},
		{"scale dtype", 128, 128, func(n string, i safetensors.TensorInfo, d []byte) (safetensors.Spec, []byte) {
			if n == "blk.1.ffn_gate_exps.0.numa.0.scale" {
				return safetensors.Spec{Name: n, DType: tensor.I32, Shape: i.Shape}, d
			}
			return same(n, i, d), d
		}, "want a 1-D F32"},
		{"zeroed first weight", 128, 128, func(n string, i safetensors.TensorInfo, d []byte) (safetensors.Spec, []byte) {
			if n == "blk.1.ffn_gate_exps.0.numa.0.weight" {
				d = make([]byte, len(d))
			}
			return same(n, i, d), d
		}, "scale"},
		{"other model", 256, 128, nil, "bytes, want"},
		{"k-group scales", 128, 128, func(n string, i safetensors.TensorInfo, d []byte) (safetensors.Spec, []byte) {
			if strings.HasSuffix(n, ".scale") {
				d = append(d, d...)
				return safetensors.Spec{Name: n, DType: i.DType, Shape: []int64{2 * i.Shape[0]}}, d
			}
			return same(n, i, d), d
		}, "k-group layouts"},
		{"other intermediate", 128, 512, nil, "want 32768 (AMXINT8) or 16384 (AMXINT4)"},
		{"pools do not divide", 128, 129, nil, "does not split"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := src
			if tc.edit != nil {
				dir = ktRewrite(t, src, tc.edit)
			}
			qd, err := OpenKTDir(dir, tc.hidden, tc.inter)
			if err == nil {
				qd.Close()
				t.Fatalf("accepted; want an error with %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := OpenKTDir(t.TempDir(), 128, 128); !errors.Is(err, ErrNotKTDir) {
		t.Errorf("empty dir: %v", err)
	}
	// corruption past the first expert is caught when the layer loads
	dir := ktRewrite(t, src, func(n string, i safetensors.TensorInfo, d []byte) (safetensors.Spec, []byte) {
		if n == "blk.1.ffn_up_exps.1.numa.1.weight" {
			for j := range d {
				d[j] /= 2
			}
		}
		return same(n, i, d), d
	})
	qd, err := OpenKTDir(dir, 128, 128)
	if err != nil {
		t.Fatal(err)
	}
	defer qd.Close()
	spec := cpuexperts.LayerSpec{Method: cpuexperts.AMXINT8, Experts: 2, Hidden: 128, Intermediate: 128}
	e := newEngine(t, spec, 2, 2, 8, 2)
	if _, err := e.NewLayerQuant(spec, qd.Layer(1)); err == nil || !strings.Contains(err.Error(), "blk.1.ffn_up_exps.1.numa.1.weight") {
		t.Errorf("halved weights: %v", err)
	}
	// the engine's pool count must match the files'
	e1 := newEngine(t, spec, 1, 2, 8, 2)
	good, err := OpenKTDir(src, 128, 128)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if _, err := e1.NewLayerQuant(spec, good.Layer(1)); err == nil || !strings.Contains(err.Error(), "thread pools") {
		t.Errorf("pool mismatch: %v", err)
	}
}

// TestQuantizeLayerKTMatchesKT: kt quant --layout kt writes, for the same
// bf16 weights, exactly the bytes KT's converter wrote (weights and scales,
// every tensor), so KT reads kt's output as its own.
func TestQuantizeLayerKTMatchesKT(t *testing.T) {
	for _, tc := range ktCases {
		spec := cpuexperts.LayerSpec{Method: tc.method, Experts: 2, Hidden: tc.hidden, Intermediate: tc.inter}
		path := filepath.Join(t.TempDir(), "model-00001-of-00001.safetensors")
		if err := QuantizeLayerKT(ktGenSource{spec, tc.seed}, spec, 2, 1, path, nil); err != nil {
			t.Fatal(err)
		}
		ok, err := CheckQuantShardLayout(path, tc.method, 2, 1, LayoutKT)
		if !ok || err != nil {
			t.Fatalf("fresh KT-layout shard not accepted for resume: %v %v", ok, err)
		}
		if _, err := CheckQuantShardLayout(path, tc.method, 2, 1, LayoutRows); err == nil {
			t.Error("KT-layout shard accepted for a rows-layout resume")
		}
		ours, err := safetensors.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := safetensors.OpenDir(tc.dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(ours.Tensors()) != len(theirs.Names()) {
			t.Fatalf("%d tensors, KT's file has %d", len(ours.Tensors()), len(theirs.Names()))
		}
		for _, name := range theirs.Names() {
			a, err1 := ours.Tensor(name)
			b, err2 := theirs.Tensor(name)
			if err1 != nil || err2 != nil || a.DType != b.DType || fmt.Sprint(a.Shape) != fmt.Sprint(b.Shape) || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("%s %s: kt's tensor differs from KT's (%v %v)", tc.method, name, err1, err2)
			}
		}
		ours.Close()
		theirs.Close()
	}
}
