package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	out, err := runCLI(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kt " + version, "go go1.", "cpu kernels "} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
}

func TestInspect(t *testing.T) {
	out, err := runCLI(t, "inspect", "--model-path", "../../testdata/models/qwen3moe-c")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Qwen3MoeForCausalLM", "dense MLP      0,2 (intermediate 96)", "check            ok", "RAM "} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "inspect", "--json", "--model-path", "../../testdata/models/qwen3moe-b")
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Check struct{ ExpertLayout string }
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Check.ExpertLayout != "fused" {
		t.Errorf("json: %v %+v\n%s", err, j, out)
	}
	if _, err := runCLI(t, "inspect"); err == nil {
		t.Error("inspect without --model-path: no error")
	}
	if _, err := runCLI(t, "inspect", "--model-path", t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("empty dir: %v", err)
	}
}

// TestInspectServingRefusal: a config kt serve refuses (a rope scaling
// its model definitions do not compute) fails kt inspect too, saying why.
func TestInspectServingRefusal(t *testing.T) {
	dir := copyModel(t, "../../testdata/models/qwen3moe-a")
	editConfig(t, dir, func(c map[string]any) {
		c["rope_parameters"] = map[string]any{"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
	})
	out, err := runCLI(t, "inspect", "--model-path", dir)
	if err == nil || !strings.Contains(err.Error(), `rope type "dynamic" is not supported`) {
		t.Errorf("inspect of a refused rope scaling: %v", err)
	}
	if !strings.Contains(out, "serving          refused: ") {
		t.Errorf("inspect output lacks the serving refusal:\n%s", out)
	}
}

func TestDoctor(t *testing.T) {
	out, err := runCLI(t, "doctor", "--json", "--model-path", "../../testdata/models/qwen3next-a")
	if err != nil && err != errChecksFailed {
		t.Fatal(err)
	}
	var j struct {
		Status  string
		Results []struct{ Name, Status string }
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	names := map[string]string{}
	for _, r := range j.Results {
		names[r.Name] = r.Status
	}
	for _, n := range []string{"cpu.isa", "cpu.amx", "cpu.cores", "memory.ram", "memory.thp", "gpu.driver", "model.weights", "model.fit"} {
		if _, ok := names[n]; !ok {
			t.Errorf("no %s result", n)
		}
	}
	if names["model.weights"] != "pass" {
		t.Errorf("model.weights = %s", names["model.weights"])
	}
}

// copyModel copies the model directory src into a temporary directory.
func copyModel(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// editConfig rewrites dir/config.json through edit.
func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	c := map[string]any{}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	edit(c)
	if b, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
