package expertdist

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ktserve/kt/internal/torchpt"
	"github.com/ktserve/kt/moe/placement"
)

// load reads a dump back as [buffer][layers*experts] counts.
func load(t *testing.T, path string) (*torchpt.Tensor, map[string]any) {
	t.Helper()
	v, err := torchpt.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	return m["logical_count"].(*torchpt.Tensor), m
}

func TestRingAndDump(t *testing.T) {
	dir := t.TempDir()
	r, err := New(3, 4, 2, dir)
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return time.Unix(1700000000, 500000000) }
	r.Add(0, []int32{1, 1}) // not recording yet: ignored
	r.EndPass()
	r.Start()
	if !r.Recording() {
		t.Fatal("not recording after Start")
	}
	// pass 1: layer 0 picks 1,1,2; layer 2 picks 3 and a masked -1
	r.Add(0, []int32{1, 1, 2})
	r.Add(2, []int32{3, -1})
	r.EndPass()
	r.EndPass() // an empty pass (no MoE work) is not a pass
	// pass 2 and 3: the ring of 2 keeps passes 2 and 3
	r.Add(1, []int32{0})
	r.EndPass()
	r.Add(2, []int32{2, 2, 9}) // 9 is out of range: skipped
	r.EndPass()
	r.Add(0, []int32{3}) // open pass: Stop commits it
	r.Stop()
	r.Add(0, []int32{0}) // stopped: ignored
	path, err := r.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "expert_distribution_recorder_1700000000.500000.pt"); path != want {
		t.Errorf("dump at %s, want %s", path, want)
	}
	lc, m := load(t, path)
	if !slices.Equal(lc.Shape, []int{2, 3, 4}) {
		t.Fatalf("logical_count shape %v", lc.Shape)
	}
	want := []float64{
		// slot 0: pass 3 (layer 2 expert 2 twice), written over pass 1
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0,
		// slot 1: pass 4 (layer 0 expert 3), written over pass 2
		0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0,
	}
	if !slices.Equal(lc.Data, want) {
		t.Errorf("logical_count %v\nwant %v", lc.Data, want)
	}
	if m["rank"] != 0 || m["num_passes"] != 4 {
		t.Errorf("rank %v, num_passes %v", m["rank"], m["num_passes"])
	}
	if r, _ := New(2, 4, -1, t.TempDir()); r != nil {
		r.Start()
		r.Add(0, []int32{1})
		r.Add(1, []int32{1})
		r.Add(0, []int32{1}) // implicit boundary
		r.Stop()
		path, _ := r.Dump()
		_, m := load(t, path)
		if m["num_passes"] != 2 {
			t.Errorf("implicit pass boundaries: %v passes, want 2", m["num_passes"])
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("dump left %d files in the directory", len(ents))
	}
	// Start clears.
	r.Start()
	r.Stop()
	path2, err := r.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if lc, _ := load(t, path2); slices.Max(lc.Data) != 0 {
		t.Errorf("after Start the buffer holds %v", lc.Data)
	}
}

// TestRunningSumFeedsFrequency: buffer -1 keeps one running sum; the dump
// is what --kt-expert-placement-strategy frequency reads.
func TestRunningSumFeedsFrequency(t *testing.T) {
	r, err := New(2, 4, -1, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	for range 5 {
		r.Add(0, []int32{2, 3})
		r.Add(1, []int32{0})
		r.EndPass()
	}
	r.Add(1, []int32{1, 1, 1, 1, 1, 1})
	r.Add(0, nil) // layer 0 again: a new pass begins (empty here)
	r.Add(1, []int32{1})
	r.EndPass()
	path, err := r.Dump()
	if err != nil {
		t.Fatal(err)
	}
	lc, _ := load(t, path)
	if !slices.Equal(lc.Shape, []int{1, 2, 4}) || !slices.Equal(lc.Data, []float64{0, 0, 5, 5, 5, 7, 0, 0}) {
		t.Fatalf("running sum %v %v", lc.Shape, lc.Data)
	}
	m, n, err := placement.Compute([]bool{true, true}, 4, placement.Request{PerLayer: 1, Strategy: placement.Frequency, StatsPath: path})
	if err != nil {
		t.Fatal(err)
	}
	// the two busiest cells: layer 1 expert 1 (7), then layer 0 expert 2 (5, lowest position among the 5s)
	if n != 2 || !m[1][1] || !m[0][2] || m.Count(0)+m.Count(1) != 2 {
		t.Errorf("frequency placement from the dump: %v (%d)", m, n)
	}
}

func TestNewErrors(t *testing.T) {
	for _, c := range []struct {
		layers, experts, buffer int
		want                    string
	}{
		{0, 4, 10, "0 layers"},
		{2, 0, 10, "0 experts"},
		{2, 4, 0, "buffer size 0"},
		{2, 4, -2, "buffer size -2"},
		{1000, 1000, 1000, "over 2^28"},
	} {
		if _, err := New(c.layers, c.experts, c.buffer, t.TempDir()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%d, %d, %d): %v, want %q", c.layers, c.experts, c.buffer, err, c.want)
		}
	}
	r, _ := New(1, 2, 1, filepath.Join(t.TempDir(), "file"))
	os.WriteFile(filepath.Join(filepath.Dir(r.dir), "file"), nil, 0o644)
	if _, err := r.Dump(); err == nil {
		t.Error("dump into a path that is a file: no error")
	}
}

// TestDumpsBounded: a recorder keeps its newest MaxDumps files and deletes
// the older ones it wrote, never a file it did not write.
func TestDumpsBounded(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "expert_distribution_recorder_1.000000.pt")
	if err := os.WriteFile(other, []byte("not ours"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := New(2, 4, 1, dir)
	if err != nil {
		t.Fatal(err)
	}
	sec := int64(1700000000)
	r.now = func() time.Time { sec++; return time.Unix(sec, 0) }
	var paths []string
	for range MaxDumps + 5 {
		p, err := r.Dump()
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	for i, p := range paths {
		_, err := os.Stat(p)
		if kept := i >= 5; kept != (err == nil) {
			t.Errorf("dump %d (%s): kept %v, want %v", i, p, err == nil, kept)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file the recorder did not write was removed: %v", err)
	}
}
