package server

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
	"github.com/ktserve/kt/internal/torchpt"
	"github.com/ktserve/kt/moe/expertdist"
)

// TestExpertDistributionRoutes drives SGLang's three recorder routes over
// HTTP: off without a recorder (400, the server keeps serving), and with
// one: start, the counts the model path reports, stop, dump to a .pt file.
func TestExpertDistributionRoutes(t *testing.T) {
	off := newTestServer(t, fakemodel.Config{}, engine.Config{}, nil)
	if code, body := off.post(t, "/start_expert_distribution_record", ""); code != http.StatusBadRequest || !strings.Contains(string(body), "--expert-distribution-recorder-mode") {
		t.Errorf("without a recorder: %d %s", code, body)
	}
	if code, _ := off.get(t, "/health"); code != http.StatusOK {
		t.Errorf("health after the refusal: %d", code)
	}

	dir := t.TempDir()
	rec, err := expertdist.New(2, 4, 8, dir)
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) { o.Experts = rec })
	if code, body := ts.post(t, "/start_expert_distribution_record", ""); code != http.StatusOK || !strings.HasPrefix(string(body), "Start recording") {
		t.Fatalf("start: %d %s", code, body)
	}
	rec.Add(1, []int32{3, 3, 0}) // what a model step reports
	rec.EndPass()
	if code, body := ts.get(t, "/stop_expert_distribution_record"); code != http.StatusOK || !strings.HasPrefix(string(body), "Stop recording") {
		t.Fatalf("stop: %d %s", code, body)
	}
	code, body := ts.post(t, "/dump_expert_distribution_record", "")
	if code != http.StatusOK {
		t.Fatalf("dump: %d %s", code, body)
	}
	path := strings.TrimSpace(string(body)[strings.Index(string(body), "Wrote ")+len("Wrote "):])
	if !strings.HasPrefix(path, dir) {
		t.Fatalf("dump wrote %q, want a file in %s", path, dir)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	v, err := torchpt.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	lc := v.(map[string]any)["logical_count"].(*torchpt.Tensor)
	if lc.Data[4+3] != 2 || lc.Data[4+0] != 1 {
		t.Errorf("dumped counts %v", lc.Data[:8])
	}
	if code, _ := ts.post(t, "/dump_expert_distribution_record", "{"); code != http.StatusOK {
		t.Errorf("dump ignores its body: %d", code)
	}
}
