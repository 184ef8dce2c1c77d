package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// rawFile assembles a safetensors file from a literal header and data.
func rawFile(t *testing.T, dir, name, hdr string, data []byte) string {
	t.Helper()
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(hdr)))
	b.WriteString(hdr)
	b.Write(data)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func f32Bytes(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func sampleTensors() []Tensor {
	bf := make([]byte, 2*6)
	for i := range 6 {
		binary.LittleEndian.PutUint16(bf[2*i:], tensor.F32ToBF16(float32(i)-2.5))
	}
	i64 := make([]byte, 8*3)
	for i := range 3 {
		binary.LittleEndian.PutUint64(i64[8*i:], uint64(int64(i)-1))
	}
	return []Tensor{
		{TensorInfo: TensorInfo{Name: "w.f32", DType: tensor.F32, Shape: []int64{2, 2}}, Data: f32Bytes(1, 2, 3, -4)},
		{TensorInfo: TensorInfo{Name: "w.bf16", DType: tensor.BF16, Shape: []int64{2, 3}}, Data: bf},
		{TensorInfo: TensorInfo{Name: "empty", DType: tensor.F16, Shape: []int64{0, 4}}, Data: nil},
		{TensorInfo: TensorInfo{Name: "ids", DType: tensor.I64, Shape: []int64{3}}, Data: i64},
		{TensorInfo: TensorInfo{Name: "scalar", DType: tensor.I32, Shape: []int64{}}, Data: []byte{7, 0, 0, 0}},
		{TensorInfo: TensorInfo{Name: "q", DType: tensor.I8, Shape: []int64{3}}, Data: []byte{0xff, 1, 0x80}},
		{TensorInfo: TensorInfo{Name: "fp8", DType: tensor.F8E4M3, Shape: []int64{2}}, Data: []byte{0x38, 0xb8}},
		{TensorInfo: TensorInfo{Name: "mask", DType: tensor.Bool, Shape: []int64{2}}, Data: []byte{1, 0}},
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.safetensors")
	ts := sampleTensors()
	meta := map[string]string{"format": "pt", "note": "héllo \"q\""}
	if err := WriteFile(p, ts, meta); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Metadata(); len(got) != 2 || got["note"] != meta["note"] || got["format"] != "pt" {
		t.Errorf("metadata = %v", got)
	}
	if len(f.Tensors()) != len(ts) {
		t.Fatalf("got %d tensors, want %d", len(f.Tensors()), len(ts))
	}
	for _, want := range ts {
		got, err := f.Tensor(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.DType != want.DType || !equalShape(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("%s: got %s %v %x, want %s %v %x", want.Name, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
		}
	}
	// File order is data order; offsets are absolute and contiguous.
	prev := f.Tensors()[0].Offset
	for _, ti := range f.Tensors() {
		if ti.Offset != prev {
			t.Errorf("%s at %d, want %d", ti.Name, ti.Offset, prev)
		}
		prev += ti.Size
	}
	st, _ := os.Stat(p)
	if prev != st.Size() {
		t.Errorf("data ends at %d, file is %d", prev, st.Size())
	}
	if (f.Tensors()[0].Offset)%8 != 0 {
		t.Errorf("data section starts at %d, not 8-aligned", f.Tensors()[0].Offset)
	}

	w, _ := f.Tensor("w.f32")
	v, err := w.F32()
	if err != nil || len(v) != 4 || v[3] != -4 {
		t.Errorf("F32 = %v, %v", v, err)
	}
	bt, _ := f.Tensor("w.bf16")
	conv, err := bt.ToF32()
	if err != nil || conv[0] != -2.5 || conv[5] != 2.5 {
		t.Errorf("BF16 ToF32 = %v, %v", conv, err)
	}
	ids, _ := f.Tensor("ids")
	iv, err := ids.I64()
	if err != nil || iv[0] != -1 || iv[2] != 1 {
		t.Errorf("I64 = %v, %v", iv, err)
	}
	q, _ := f.Tensor("q")
	qv, err := q.I8()
	if err != nil || qv[0] != -1 || qv[2] != -128 {
		t.Errorf("I8 = %v, %v", qv, err)
	}
	f8, _ := f.Tensor("fp8")
	fv, err := f8.ToF32()
	if err != nil || fv[0] != 1 || fv[1] != -1 {
		t.Errorf("F8 ToF32 = %v, %v", fv, err)
	}
	m, _ := f.Tensor("mask")
	mv, err := m.Bool()
	if err != nil || !mv[0] || mv[1] {
		t.Errorf("Bool = %v, %v", mv, err)
	}
	e, _ := f.Tensor("empty")
	if ev, err := e.F16(); err != nil || len(ev) != 0 {
		t.Errorf("empty F16 = %v, %v", ev, err)
	}
	// dtype mismatch is an error naming the tensor, not a panic.
	if _, err := w.BF16(); err == nil || !strings.Contains(err.Error(), `"w.f32"`) {
		t.Errorf("BF16 of F32 tensor: err = %v", err)
	}
	if _, err := m.ToF32(); err == nil {
		t.Error("ToF32 of BOOL tensor: no error")
	}
	if _, err := f.Tensor("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing tensor: err = %v", err)
	}
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMisaligned reads a file whose header length is odd, so typed views
// must copy rather than alias misaligned memory.
func TestMisaligned(t *testing.T) {
	hdr := `{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}` // 55 bytes
	if len(hdr)%4 == 0 {
		hdr += " "
	}
	p := rawFile(t, t.TempDir(), "m.safetensors", hdr, f32Bytes(1.5, -2))
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, _ := f.Tensor("x")
	v, err := x.F32()
	if err != nil || v[0] != 1.5 || v[1] != -2 {
		t.Errorf("F32 = %v, %v", v, err)
	}
}

func TestOpenErrors(t *testing.T) {
	d8 := f32Bytes(1, 2)
	cases := []struct {
		name string
		hdr  string
		data []byte
		want string // substring of the error
	}{
		{"not json", `{"a":`, d8, "bad entry"},
		{"unclosed", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`, d8, "not valid JSON"},
		{"number key", `{1:2}`, d8, "not valid JSON"},
		{"array", `[1,2]`, d8, "not a JSON object"},
		{"string", `"abc"`, d8, "not a JSON object"},
		{"unknown dtype", `{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,8]}}`, d8, `tensor "a": unknown dtype "F4"`},
		{"missing dtype", `{"a":{"shape":[2],"data_offsets":[0,8]}}`, d8, `tensor "a": missing dtype`},
		{"missing shape", `{"a":{"dtype":"F32","data_offsets":[0,8]}}`, d8, `tensor "a": missing shape`},
		{"negative dim", `{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, d8, "not a non-negative integer"},
		{"float dim", `{"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}`, d8, "not a non-negative integer"},
		{"huge dims", `{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, d8, "overflows"},
		{"too many dims", `{"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,8]}}`, d8, "dimensions"},
		{"size mismatch", `{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, d8, `tensor "a": shape [3] of F32 needs 12 bytes`},
		{"offsets reversed", `{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, d8, "end before they begin"},
		{"offsets len", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}`, d8, "data_offsets must have 2"},
		{"offset past end", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, d8, "past the end"},
		{"overlap", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, d8, "overlaps"},
		{"gap", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, d8, "gap of 4 bytes"},
		{"short cover", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, d8, "cover 4 bytes"},
		{"duplicate", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, d8, `tensor "a": duplicate`},
		{"bad metadata", `{"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, d8, "is not a string"},
		{"metadata array", `{"__metadata__":[],"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, d8, "not an object"},
		{"entry not object", `{"a":5}`, d8, `tensor "a": bad entry`},
		{"empty name", `{"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, d8, "empty tensor name"},
		{"trailing", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} x`, d8, "trailing bytes"},
		{"truncated data", `{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, d8, "truncated"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := rawFile(t, dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors", c.hdr, c.data)
			f, err := Open(p)
			if err == nil {
				f.Close()
				t.Fatal("no error")
			}
			var se *Error
			if !errors.As(err, &se) || se.File != p {
				t.Errorf("error %v does not name the file", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
		})
	}
}

func TestOpenBadPrefix(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	huge := make([]byte, 16)
	binary.LittleEndian.PutUint64(huge, math.MaxUint64)
	big := make([]byte, 16)
	binary.LittleEndian.PutUint64(big, 50<<20) // under the cap, past EOF
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"short", []byte{1, 2, 3}, "too short"},
		{"absurd length", huge, "exceeds"},
		{"past eof", big, "runs past the end"},
		{"zero length", make([]byte, 8), "too short for a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(write(strings.ReplaceAll(c.name, " ", "_"), c.data))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: err = %v", err)
	}
}

// TestTruncatedCopy cuts a valid file at every length and checks each copy
// is rejected cleanly.
func TestTruncatedCopy(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "full.safetensors")
	if err := WriteFile(p, sampleTensors(), nil); err != nil {
		t.Fatal(err)
	}
	full, _ := os.ReadFile(p)
	for n := 0; n < len(full); n++ {
		q := filepath.Join(dir, "cut.safetensors")
		if err := os.WriteFile(q, full[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		if f, err := Open(q); err == nil {
			f.Close()
			t.Fatalf("truncated to %d of %d bytes: no error", n, len(full))
		}
	}
}

func TestWriterStreaming(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.safetensors")
	specs := []Spec{
		{Name: "a", DType: tensor.F32, Shape: []int64{3}},
		{Name: "z", DType: tensor.U8, Shape: []int64{0}},
		{Name: "b", DType: tensor.U8, Shape: []int64{5}},
		{Name: "c", DType: tensor.I16, Shape: []int64{2}},
	}
	w, err := Create(p, specs, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("b", []byte{1}); err == nil || !strings.Contains(err.Error(), `"a" is due next`) {
		t.Errorf("out of order: err = %v", err)
	}
	a := f32Bytes(1, 2, 3)
	if _, err := w.Write(a[:5]); err != nil { // pieces crossing nothing yet
		t.Fatal(err)
	}
	if err := w.WriteTensor("b", make([]byte, 5)); err == nil || !strings.Contains(err.Error(), "partly written") {
		t.Errorf("partial: err = %v", err)
	}
	if _, err := w.Write(a[5:]); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("a", a); err == nil || !strings.Contains(err.Error(), "already written") {
		t.Errorf("rewrite: err = %v", err)
	}
	if err := w.WriteTensor("z", nil); err != nil {
		t.Errorf("zero-size tensor: %v", err)
	}
	if err := w.WriteTensor("b", []byte{1, 2}); err == nil || !strings.Contains(err.Error(), "needs 5") {
		t.Errorf("short WriteTensor: err = %v", err)
	}
	if err := w.WriteTensorFrom("b", bytes.NewReader([]byte{1, 2, 3, 4, 5, 6, 7})); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte{9, 9, 9, 9, 9}); err == nil || !strings.Contains(err.Error(), "past the end") {
		t.Errorf("overflow write: err = %v", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("target exists before Close: %v", err)
	}
	if err := w.WriteTensorFrom("c", bytes.NewReader([]byte{1, 0, 2, 0})); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := f.Tensor("b")
	if !bytes.Equal(b.Data, []byte{1, 2, 3, 4, 5}) {
		t.Errorf("b = %v", b.Data)
	}
	c, _ := f.Tensor("c")
	if v, err := c.I16(); err != nil || v[1] != 2 {
		t.Errorf("c = %v, %v", v, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file", len(entries))
	}
}

func TestWriterIncompleteAndAbort(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "i.safetensors")
	w, err := Create(p, []Spec{{Name: "a", DType: tensor.F32, Shape: []int64{2}}, {Name: "b", DType: tensor.F32, Shape: []int64{1}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("a", f32Bytes(1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensorFrom("b", bytes.NewReader([]byte{1})); err == nil || !strings.Contains(err.Error(), "gave 1 bytes") {
		t.Errorf("short reader: err = %v", err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Errorf("Close of incomplete file: err = %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %d files behind", len(entries))
	}
	w, err = Create(p, []Spec{{Name: "a", DType: tensor.F32, Shape: []int64{2}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Abort left %d files behind", len(entries))
	}
	for _, specs := range [][]Spec{
		{{Name: "a", DType: tensor.F32}, {Name: "a", DType: tensor.F32}},
		{{Name: "", DType: tensor.F32}},
		{{Name: "__metadata__", DType: tensor.F32}},
		{{Name: "x", DType: tensor.Invalid}},
		{{Name: "x", DType: tensor.F32, Shape: []int64{-1}}},
		{{Name: "x", DType: tensor.F64, Shape: []int64{1 << 62}}},
	} {
		if w, err := Create(p, specs, nil); err == nil {
			w.Abort()
			t.Errorf("Create(%v): no error", specs)
		}
	}
}

func TestOpenDir(t *testing.T) {
	ts := sampleTensors()
	t.Run("sharded", func(t *testing.T) {
		dir := t.TempDir()
		if err := WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), ts[:3], nil); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), ts[3:], nil); err != nil {
			t.Fatal(err)
		}
		writeIndex(t, dir, ts, 3)
		c, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if len(c.Names()) != len(ts) || len(c.Files()) != 2 {
			t.Fatalf("names %v files %d", c.Names(), len(c.Files()))
		}
		for _, want := range ts {
			got, err := c.Tensor(want.Name)
			if err != nil || !bytes.Equal(got.Data, want.Data) {
				t.Errorf("%s: %v", want.Name, err)
			}
		}
		var sum int64
		for _, want := range ts {
			sum += int64(len(want.Data))
		}
		if c.TotalBytes() != sum {
			t.Errorf("TotalBytes = %d, want %d", c.TotalBytes(), sum)
		}
		if _, err := c.Tensor("nope"); !errors.Is(err, ErrNotFound) {
			t.Errorf("missing: %v", err)
		}
	})
	t.Run("index points wrong", func(t *testing.T) {
		dir := t.TempDir()
		WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), ts[:3], nil)
		WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), ts[3:], nil)
		writeIndex(t, dir, ts, 4)
		_, err := OpenDir(dir)
		if err == nil || !strings.Contains(err.Error(), `"ids"`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("duplicate across shards", func(t *testing.T) {
		dir := t.TempDir()
		WriteFile(filepath.Join(dir, "a.safetensors"), ts[:3], nil)
		WriteFile(filepath.Join(dir, "b.safetensors"), ts[2:], nil)
		_, err := OpenDir(dir)
		if err == nil || !strings.Contains(err.Error(), `tensor "empty" is in both a.safetensors and b.safetensors`) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("escaping shard", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"a":"../x.safetensors"}}`), 0o644)
		if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), "not a file name") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("bad index", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":5}`), 0o644)
		if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), IndexFile) {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("single preferred", func(t *testing.T) {
		dir := t.TempDir()
		WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil)
		WriteFile(filepath.Join(dir, "adapter.safetensors"), ts, nil)
		c, err := OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if len(c.Files()) != 1 {
			t.Errorf("opened %d files", len(c.Files()))
		}
	})
	t.Run("empty dir", func(t *testing.T) {
		if _, err := OpenDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no ") {
			t.Errorf("err = %v", err)
		}
	})
}

func writeIndex(t *testing.T, dir string, ts []Tensor, split int) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"metadata":{"total_size":0},"weight_map":{`)
	for i, x := range ts {
		if i > 0 {
			b.WriteByte(',')
		}
		shard := "model-00001-of-00002.safetensors"
		if i >= split {
			shard = "model-00002-of-00002.safetensors"
		}
		b.WriteString(`"` + x.Name + `":"` + shard + `"`)
	}
	b.WriteString("}}")
	if err := os.WriteFile(filepath.Join(dir, IndexFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
