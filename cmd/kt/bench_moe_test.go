//go:build linux && amd64 && cgo

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ktserve/kt/moe/cpuexperts"
)

// fakePython writes an executable that stands in for the interpreter: it
// ignores its arguments, prints out and exits with code.
func fakePython(t *testing.T, out string, code int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "python")
	script := "#!/bin/sh\ncat <<'EOF'\n" + out + "\nEOF\necho 'torch says why' >&2\nexit " + string(rune('0'+code)) + "\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunTorchParsesBaseline: the baseline's JSON lines give the fastest
// form per token count with every form's figure; junk lines are skipped; a
// failing interpreter's stderr reaches the error.
func TestRunTorchParsesBaseline(t *testing.T) {
	shape := cpuexperts.BenchShape{Name: "x", Experts: 8, Hidden: 128, Intermediate: 64, TopK: 2}
	out := `{"tokens": 1, "seconds": 0.001, "tflops": 0.02, "variant": "fused", "threads": 16, "all": {"index@15": 0.015, "fused@16": 0.02}}
warning: not json
{"tokens": 4096, "seconds": 0.2, "tflops": 1.5, "variant": "index", "threads": 15, "all": {"index@15": 1.5, "fused@15": 1.4}}`
	res, err := runTorch(fakePython(t, out, 0), shape, []int{1, 4096}, 15)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[1]; r.TFLOPS != 0.02 || r.Variant != "fused" || r.Threads != 16 || r.All["index@15"] != 0.015 {
		t.Errorf("1 token: %+v", r)
	}
	if r := res[4096]; r.TFLOPS != 1.5 || r.Variant != "index" {
		t.Errorf("4096 tokens: %+v", r)
	}
	if got, want := res[4096].allText(), "fused@15 1.400, index@15 1.500"; got != want {
		t.Errorf("allText %q, want %q", got, want)
	}
	if _, err := runTorch(fakePython(t, "", 1), shape, []int{1}, 15); err == nil || !strings.Contains(err.Error(), "torch says why") {
		t.Errorf("failing interpreter: %v", err)
	}
}
