package modelconfig

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/safetensors"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// TestFixturesGolden pins the derived facts and the check report of every
// fixture checkpoint. Run with -update after an intended change and review
// the diff.
func TestFixturesGolden(t *testing.T) {
	for _, dir := range fixtures(t) {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			c, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			g, ok, err := LoadGeneration(dir)
			if err != nil || !ok {
				t.Fatalf("generation config: ok=%v err=%v", ok, err)
			}
			ck, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			r := Check(c, ck)
			got, err := json.MarshalIndent(struct {
				Config     *Config
				Generation *GenerationConfig
				Report     *Report
			}{c, g, r}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			golden := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the golden file; got:\n%s", golden, got)
			}
		})
	}
}
