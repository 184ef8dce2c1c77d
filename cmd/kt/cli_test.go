package main

import (
	"encoding/json"
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
