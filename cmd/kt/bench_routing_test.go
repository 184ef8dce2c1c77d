package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// trainedModel is the bundled trained Qwen3-MoE (3 MoE layers, 32
// experts, top-4).
var trainedModel = filepath.Join("..", "..", "testdata", "models", "qwen3moe-trained")

// routingTexts writes two different slices of the trained model's
// held-out text: the measured one and the calibration one.
func routingTexts(t *testing.T) (data, calib string) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(trainedModel, "heldout.txt"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, calib = filepath.Join(dir, "data.txt"), filepath.Join(dir, "calib.txt")
	if err := os.WriteFile(data, text[:3000], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(calib, text[3000:5000], 0o644); err != nil {
		t.Fatal(err)
	}
	return data, calib
}

func TestBenchRouting(t *testing.T) {
	data, calib := routingTexts(t)
	jsonPath := filepath.Join(t.TempDir(), "routing.json")
	stdout, stderr, err := runKT(t, "bench", "--type", "routing", "--model-path", trainedModel, "--data", data, "--calib", calib,
		"--ctx", "256", "--threads", "2", "--json", jsonPath)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"top 3 (10%)", "frequency", "dynamic update", "best fixed"} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("output lacks %q:\n%s", want, stdout)
		}
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var res routingResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Windows < 3 || res.Experts != 32 || res.TopK != 4 || len(res.Layers) != 3 || res.CalibTokens == 0 || len(res.Skipped) != 0 {
		t.Fatalf("result %+v", res)
	}
	// every token of every window routes to top-k experts per layer
	for _, l := range res.Layers {
		if l.Picks != int64(res.Tokens*res.TopK) || l.Entropy <= 0 || l.Entropy > 1 || l.Top25 < l.Top10 || l.Top10 < 3.0/32 {
			t.Fatalf("layer %+v for %d tokens", l, res.Tokens)
		}
	}
	rows := map[string][]float64{}
	for _, s := range res.Strategies {
		if len(s.Share) != len(routingRatios) {
			t.Fatalf("%s: %d shares", s.Name, len(s.Share))
		}
		rows[s.Name] = s.Share
		// the GPU experts of a larger ratio include those of a smaller one
		for i := 1; i < len(s.Share); i++ {
			if s.Share[i] < s.Share[i-1] || s.Share[i] > 1 {
				t.Fatalf("%s: shares %v", s.Name, s.Share)
			}
		}
	}
	for _, name := range []string{"uniform", "front-loading", "random", "frequency", "dynamic update", "best fixed (bound)"} {
		if rows[name] == nil {
			t.Fatalf("no %s row: %v", name, rows)
		}
	}
	for name, share := range rows {
		for i, v := range share {
			if name != "dynamic update" && v > rows["best fixed (bound)"][i]+1e-12 {
				t.Fatalf("%s at %.0f%%: %v over the best fixed placement's %v", name, 100*routingRatios[i], v, rows["best fixed (bound)"][i])
			}
		}
	}
}

func TestBenchRoutingErrors(t *testing.T) {
	data, _ := routingTexts(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no data", []string{"--model-path", trainedModel}, "--data is required"},
		{"no model", []string{"--data", data}, "one --model-path"},
		{"two models", []string{"--model-path", trainedModel, "--model-path", trainedModel, "--data", data}, "one --model-path"},
		{"short ctx", []string{"--model-path", trainedModel, "--data", data, "--ctx", "1"}, "--ctx"},
		{"missing calib", []string{"--model-path", trainedModel, "--data", data, "--calib", data + ".none"}, "--calib"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runKT(t, append([]string{"bench", "--type", "routing"}, c.args...)...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	// without --calib the frequency strategy is skipped, and says so
	stdout, _, err := runKT(t, "bench", "--type", "routing", "--model-path", trainedModel, "--data", data, "--ctx", "512", "--threads", "2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, "skipped: frequency") || strings.Contains(stdout, "\nfrequency") {
		t.Fatalf("frequency not reported skipped:\n%s", stdout)
	}
}
