//go:build linux && amd64 && cgo

package main

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/arch/qwen3moe"
)

// TestServeDeferral serves a synthetic model with
// --kt-max-deferred-experts-per-token 1 on the CPU expert engine: the
// greedy ids are the reference op's with the same deferral (in process),
// the startup log says deferral is on, and kt generate prints the same
// ids for its first prompt. Negative values and deferral of experts that
// stay on the GPU are refused saying why.
func TestServeDeferral(t *testing.T) {
	dir := t.TempDir()
	if err := qwen3moe.WriteSynthetic(dir, ktTestShape, 5); err != nil {
		t.Fatal(err)
	}
	// the server's chunks (--chunked-prefill-size 8): with deferral the
	// batch-wide OR of protected experts depends on the step's rows
	ref := backendReference(t, dir, 1, 8)

	url, logs := startServeLogs(t, "--model-path", dir, "--skip-tokenizer-init", "--max-running-requests", "2", "--max-total-tokens", "256",
		"--chunked-prefill-size", "8", "--kt-cpuinfer", "2", "--kt-weight-path", dir, "--kt-method", "BF16", "--kt-max-deferred-experts-per-token", "1")
	if got := generateIDs(t, url); !slices.EqualFunc(got, ref, slices.Equal) {
		t.Errorf("deferral on the engine: %v\nreference op with deferral: %v", got, ref)
	}
	if want := "deferral: 1 of 2 experts per token"; !strings.Contains(logs(), want) {
		t.Errorf("startup log lacks %q:\n%s", want, logs())
	}

	args := []string{"generate", "--model-path", dir, "--input-ids", "5,17,250,3,99,42", "--max-new-tokens", "12", "--ignore-eos", "--device", "cpu", "--json", "--chunked-prefill-size", "8",
		"--kt-method", "BF16", "--kt-weight-path", dir, "--kt-cpuinfer", "2", "--kt-max-deferred-experts-per-token", "1"}
	out, stderr, err := runKT(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "deferral: 1 of 2") {
		t.Errorf("generate's stderr does not say deferral is on:\n%s", stderr)
	}
	var res struct {
		OutputIDs []int32 `json:"output_ids"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("generate --json: %v\n%s", err, out)
	}
	if !slices.Equal(res.OutputIDs, ref[0]) {
		t.Errorf("generate with deferral: %v, reference op with deferral: %v", res.OutputIDs, ref[0])
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kt-max-deferred-experts-per-token", "-1"}, "must not be negative"},
		{[]string{"--device", "cuda", "--kt-max-deferred-experts-per-token", "1"}, "give --kt-method (the hybrid step)"},
	} {
		a := append([]string{"generate", "--model-path", dir, "--input-ids", "5", "--max-new-tokens", "1"}, c.args...)
		if _, _, err := runKT(t, a...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
	err = runServe(context.Background(), []string{"--port", "0", "--model-path", dir, "--kt-max-deferred-experts-per-token", "1"}, io.Discard, io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "--kt-max-deferred-experts-per-token: has no effect without --kt-weight-path") {
		t.Errorf("serve deferral without CPU experts: %v", err)
	}
}
