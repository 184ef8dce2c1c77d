package modelconfig

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/safetensors"
)

// TestDescribeGolden pins Describe's text for every fixture.
func TestDescribeGolden(t *testing.T) {
	for _, dir := range fixtures(t) {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			c, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			g, _, err := LoadGeneration(dir)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			var b bytes.Buffer
			if err := Describe(&b, c, g, Check(c, ck)); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", name+".txt")
			if *update {
				os.WriteFile(golden, b.Bytes(), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("differs from %s:\n%s", golden, b.String())
			}
		})
	}
}

func TestRanges(t *testing.T) {
	for in, want := range map[string]string{"": "none", "0": "0", "0,1,2,5,7,8,9": "0-2,5,7-9"} {
		var xs []int
		for _, r := range in {
			if r != ',' {
				xs = append(xs, int(r-'0'))
			}
		}
		if got := ranges(xs); got != want {
			t.Errorf("ranges(%v) = %s, want %s", xs, got, want)
		}
	}
}
