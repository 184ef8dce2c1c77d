package torchpt

import (
	"archive/zip"
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// values is gen_torchpt.py's values(): the element i of every test tensor.
func values(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64((i*7 + 3) % 11)
	}
	return out
}

// files lists the good test files: emu_* always (written without torch),
// real_* when torch.save wrote them on the GPU machine.
func files(t *testing.T, kind string) []string {
	var out []string
	for _, p := range []string{"emu_", "real_"} {
		f := filepath.Join("testdata", p+kind+".pt")
		if _, err := os.Stat(f); err == nil {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no testdata/*_%s.pt", kind)
	}
	return out
}

func TestLoad(t *testing.T) {
	for _, f := range files(t, "stats") {
		v, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: %T, want a dict", f, v)
		}
		lc, ok := m["logical_count"].(*Tensor)
		if !ok || !slices.Equal(lc.Shape, []int{2, 3, 4}) || !slices.Equal(lc.Data, values(24)) {
			t.Errorf("%s: logical_count %+v", f, m["logical_count"])
		}
		if m["rank"] != 0 || m["average_utilization_rate_over_window"] != 0.5 {
			t.Errorf("%s: rank %v, rate %v", f, m["rank"], m["average_utilization_rate_over_window"])
		}
	}
	for _, f := range files(t, "raw") {
		v, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if x, ok := v.(*Tensor); !ok || !slices.Equal(x.Shape, []int{1, 3, 4}) || !slices.Equal(x.Data, values(12)) {
			t.Errorf("%s: %+v", f, v)
		}
	}
	// A transposed view: element [i][j] of the [4,3] view is storage[j*4+i].
	for _, f := range files(t, "view") {
		v, err := Load(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		x, ok := v.(map[string]any)["t"].(*Tensor)
		if !ok || !slices.Equal(x.Shape, []int{4, 3}) {
			t.Fatalf("%s: %+v", f, v)
		}
		src := values(12)
		for i := range 4 {
			for j := range 3 {
				if x.Data[i*3+j] != src[j*4+i] {
					t.Fatalf("%s: [%d][%d] = %v, want %v", f, i, j, x.Data[i*3+j], src[j*4+i])
				}
			}
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	notZip := filepath.Join(dir, "x.pt")
	if err := os.WriteFile(notZip, []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join("testdata", "emu_stats.pt"))
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "trunc.pt")
	if err := os.WriteFile(truncated, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, want string }{
		{filepath.Join(dir, "missing.pt"), "not a torch.save zip"},
		{notZip, "not a torch.save zip"},
		{truncated, "not a torch.save zip"},
		{filepath.Join("testdata", "bad_numel.pt"), "record holds"},
		{filepath.Join("testdata", "bad_view.pt"), "outside its storage"},
	} {
		_, err := Load(c.file)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", filepath.Base(c.file), err, c.want)
		}
	}
}

// FuzzLoadReader feeds arbitrary bytes (seeded with the test files and
// their corruptions) to the reader: it may fail, never panic or allocate
// beyond its limits.
func FuzzLoadReader(f *testing.F) {
	ents, _ := os.ReadDir("testdata")
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join("testdata", e.Name())); err == nil && strings.HasSuffix(e.Name(), ".pt") {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = LoadReader(bytes.NewReader(b), int64(len(b)))
	})
}

// TestSaveLoad writes a recorder-style dict with Save and reads it back
// with Load (torch.load reads the same file on the GPU machine: see
// tools/fixtures/gen_torchpt.py --check).
func TestSaveLoad(t *testing.T) {
	lc := &IntTensor{Shape: []int{2, 3, 4}}
	for i := range 24 {
		lc.Data = append(lc.Data, int32(i*1000003-7))
	}
	obj := map[string]any{"rank": 0, "logical_count": lc, "average_utilization_rate_over_window": 0.25,
		"big": 1 << 40, "neg": -5, "mid": 70000, "none": nil, "flag": true, "name": "kt", "nested": map[string]any{"x": 1}}
	var buf bytes.Buffer
	if err := Save(&buf, "expert_distribution_recorder_1", obj); err != nil {
		t.Fatal(err)
	}
	v, err := LoadReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	got, ok := m["logical_count"].(*Tensor)
	if !ok || !slices.Equal(got.Shape, lc.Shape) {
		t.Fatalf("logical_count %+v", m["logical_count"])
	}
	for i, x := range lc.Data {
		if got.Data[i] != float64(x) {
			t.Fatalf("logical_count[%d] = %v, want %d", i, got.Data[i], x)
		}
	}
	for k, want := range map[string]any{"rank": 0, "average_utilization_rate_over_window": 0.25, "big": 1 << 40,
		"neg": -5, "mid": 70000, "none": nil, "flag": true, "name": "kt"} {
		if m[k] != want {
			t.Errorf("%s = %v (%T), want %v", k, m[k], m[k], want)
		}
	}
	if n, ok := m["nested"].(map[string]any); !ok || n["x"] != 1 {
		t.Errorf("nested = %v", m["nested"])
	}
	// storages start on 64-byte boundaries, as torch writes them
	zr, err := zip.NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		if off, err := f.DataOffset(); err != nil || off%64 != 0 {
			t.Errorf("%s: data at %d (%v), want a multiple of 64", f.Name, off, err)
		}
	}
	if err := Save(&buf, "x", map[string]any{"bad": []int{1}}); err == nil {
		t.Error("saving a []int: no error")
	}
	if err := Save(&buf, "x", &IntTensor{Shape: []int{2}, Data: []int32{1}}); err == nil {
		t.Error("saving a tensor shorter than its shape: no error")
	}
}

var update = flag.Bool("update", false, "rewrite testdata/kt_saved.pt")

// TestSaveGolden keeps testdata/kt_saved.pt, a recorder-style file written
// by Save, byte for byte (go test -update rewrites it). The GPU machine
// checks that torch.load reads it: python3 tools/fixtures/gen_torchpt.py
// --check internal/torchpt/testdata/kt_saved.pt.
func TestSaveGolden(t *testing.T) {
	lc := &IntTensor{Shape: []int{2, 3, 4}}
	for i := range 24 {
		lc.Data = append(lc.Data, int32((i*7+3)%11))
	}
	var buf bytes.Buffer
	if err := Save(&buf, "kt_saved", map[string]any{"rank": 0, "logical_count": lc, "average_utilization_rate_over_window": 0.5}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "kt_saved.pt")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("Save's output differs from %s (run with -update if the change is intended)", golden)
	}
}
