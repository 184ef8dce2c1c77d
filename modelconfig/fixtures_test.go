package modelconfig

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ktserve/kt/safetensors"
)

// fixtureDir is the repository's tiny transformers-written checkpoints.
const fixtureDir = "../testdata/models"

func fixtures(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(fixtureDir, "*", "config.json"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no fixtures under %s: %v", fixtureDir, err)
	}
	var dirs []string
	for _, p := range m {
		dirs = append(dirs, filepath.Dir(p))
	}
	return dirs
}

func TestFixturesCheck(t *testing.T) {
	for _, dir := range fixtures(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			c, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := safetensors.OpenDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			r := Check(c, ck)
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			if len(r.Unexpected) > 0 {
				t.Errorf("unexpected tensors: %v", r.Unexpected)
			}
			t.Logf("%s layout=%s prefix=%s tensors=%d extras=%d experts=%d bytes", c.Architecture, r.ExpertLayout, r.Prefix, r.NumTensors, r.Extras, r.RoutedExpertBytes)
		})
	}
	_ = os.Stdout
}
