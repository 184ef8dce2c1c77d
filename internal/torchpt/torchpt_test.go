package torchpt

import (
	"bytes"
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
