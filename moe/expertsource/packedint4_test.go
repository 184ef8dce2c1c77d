package expertsource

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
)

// tensors is a TensorGetter over tensors built in memory.
type tensors map[string]safetensors.Tensor

func (m tensors) Tensor(name string) (safetensors.Tensor, error) {
	t, ok := m[name]
	if !ok {
		return t, fmt.Errorf("tensor %q: not found", name)
	}
	return t, nil
}

func tensorOf(name string, dt tensor.DType, data []byte, shape ...int64) safetensors.Tensor {
	return safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: dt, Shape: shape}, Data: data}
}

// packedCase packs q ([rows][cols] in -8..7) with scales per group of g
// columns as compressed-tensors does and returns the getter.
func packedCase(q [][]int, scales [][]float32, g int, shapeDType tensor.DType) tensors {
	rows, cols := len(q), len(q[0])
	words := (cols + 7) / 8
	pk := make([]byte, 4*rows*words)
	for r := range rows {
		for c := range cols {
			i := 4 * (r*words + c/8)
			binary.LittleEndian.PutUint32(pk[i:], binary.LittleEndian.Uint32(pk[i:])|uint32(q[r][c]+8)<<(4*(c%8)))
		}
	}
	groups := (cols + g - 1) / g
	sc := make([]byte, 4*rows*groups)
	for r := range rows {
		for j := range groups {
			binary.LittleEndian.PutUint32(sc[4*(r*groups+j):], math.Float32bits(scales[r][j]))
		}
	}
	var shape []byte
	if shapeDType == tensor.I64 {
		shape = binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(rows)), uint64(cols))
	} else {
		shape = binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(rows)), uint32(cols))
	}
	return tensors{
		"w.weight_packed": tensorOf("w.weight_packed", tensor.I32, pk, int64(rows), int64(words)),
		"w.weight_scale":  tensorOf("w.weight_scale", tensor.F32, sc, int64(rows), int64(groups)),
		"w.weight_shape":  tensorOf("w.weight_shape", shapeDType, shape, 2),
	}
}

// TestPackedInt4Dequant checks the unpacking of pack-quantized INT4 (the
// lowest nibble first, codes offset by 8, a scale per group of columns)
// over every code, a column count that fills no whole word and a last
// group that is partial, with I64 and I32 shape tensors.
func TestPackedInt4Dequant(t *testing.T) {
	const rows, cols, g = 3, 21, 8
	q := make([][]int, rows)
	scales := make([][]float32, rows)
	for r := range rows {
		q[r] = make([]int, cols)
		for c := range cols {
			q[r][c] = (r*cols+c)%16 - 8
		}
		scales[r] = []float32{0.5, -0.25, float32(r + 1)}
	}
	for _, dt := range []tensor.DType{tensor.I64, tensor.I32} {
		h, err := PackedInt4Host(packedCase(q, scales, g, dt), "w", g)
		if err != nil {
			t.Fatal(err)
		}
		m, err := HostMatrix(h)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Check(rows, cols); err != nil || !m.PackedInt4() || m.Int4Group != g {
			t.Fatalf("matrix %s %dx%d group %d: %v", m.DType, m.Rows, m.Cols, m.Int4Group, err)
		}
		f := make([]float32, rows*cols)
		m.DequantInt4(f)
		for r := range rows {
			for c := range cols {
				got := f[r*cols+c]
				if want := float32(q[r][c]) * scales[r][c/g]; got != want {
					t.Fatalf("%s: [%d %d] = %g, want %g", dt, r, c, got, want)
				}
			}
		}
	}
}

// TestPackedInt4Errors checks that malformed packed weights are refused
// with the tensor named.
func TestPackedInt4Errors(t *testing.T) {
	q := [][]int{{1, 2, 3, 4, 5, 6, 7, -8}}
	good := func() tensors { return packedCase(q, [][]float32{{1}}, 8, tensor.I64) }
	for _, c := range []struct {
		name string
		edit func(m tensors)
		want string
	}{
		{"no scale", func(m tensors) { delete(m, "w.weight_scale") }, "w.weight_scale"},
		{"no shape", func(m tensors) { delete(m, "w.weight_shape") }, "w.weight_shape"},
		{"shape dtype", func(m tensors) {
			m["w.weight_shape"] = tensorOf("w.weight_shape", tensor.F32, make([]byte, 8), 2)
		}, "want two I32 or I64 sizes"},
		{"shape too wide", func(m tensors) {
			m["w.weight_shape"] = tensorOf("w.weight_shape", tensor.I64, binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 1), 9), 2)
		}, "needs 8 bytes of words"},
		{"negative size", func(m tensors) {
			m["w.weight_shape"] = tensorOf("w.weight_shape", tensor.I32, binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 1), 0xffffffff), 2)
		}, "want [out, in]"},
		{"scale rows", func(m tensors) {
			m["w.weight_scale"] = tensorOf("w.weight_scale", tensor.F32, make([]byte, 8), 2, 1)
		}, "group scales"},
		{"scale dtype", func(m tensors) {
			m["w.weight_scale"] = tensorOf("w.weight_scale", tensor.I32, make([]byte, 4), 1, 1)
		}, "want BF16, F16 or F32"},
	} {
		m := good()
		c.edit(m)
		if _, err := PackedInt4Host(m, "w", 8); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestPackedInt4CheckpointSource checks that a checkpoint whose experts
// are packed INT4 is found by its .weight_packed names and that
// CheckpointSource serves their codes and scales, whose f32 values
// (Matrix.DequantInt4) are what kt quant converts.
func TestPackedInt4CheckpointSource(t *testing.T) {
	q := [][]int{{-8, -1, 0, 1, 7, 3, 2, -2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, -8}}
	scales := [][]float32{{2, 0.5}, {1, -1}}
	one := packedCase(q, scales, 8, tensor.I32)
	ck := tensors{}
	var names []string
	for _, p := range []string{"gate", "up", "down"} {
		for suffix, tt := range one {
			name := "model.layers.3.mlp.experts.0." + p + "_proj" + strings.TrimPrefix(suffix, "w")
			tt.Name = name
			ck[name] = tt
			names = append(names, name)
		}
	}
	et, err := FindExpertTensors(names, nil)
	if err != nil || et.Prefix != "model." || et.Naming != NamingProj || !slices.Equal(et.Layers, []int{3}) || et.Experts != 1 {
		t.Fatalf("found %+v, %v", et, err)
	}
	src := &CheckpointSource{Ckpt: ck, Prefix: "model.", Layer: 3, Int4Group: 8}
	m, err := src.Matrix(0, cpuexperts.Up)
	if err != nil {
		t.Fatal(err)
	}
	f := make([]float32, len(q)*len(q[0]))
	m.DequantInt4(f)
	for r := range q {
		for c := range q[r] {
			got := f[r*len(q[r])+c]
			if want := float32(q[r][c]) * scales[r][c/8]; got != want {
				t.Fatalf("[%d %d] = %g, want %g", r, c, got, want)
			}
		}
	}
	if _, err := (&CheckpointSource{Ckpt: ck, Prefix: "model.", Layer: 3}).Matrix(0, cpuexperts.Up); err == nil {
		t.Error("packed experts read without a group size")
	}
}
