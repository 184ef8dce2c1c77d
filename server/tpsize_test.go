package server

import (
	"encoding/json"
	"testing"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

// TestServerInfoTPSize checks /get_server_info's tp_size: the model's
// tensor-parallel size, 1 when none is given.
func TestServerInfoTPSize(t *testing.T) {
	for _, tc := range []struct{ set, want int }{{0, 1}, {1, 1}, {4, 4}} {
		ts := newTestServer(t, fakemodel.Config{}, engine.Config{}, func(o *Options) { o.TPSize = tc.set })
		code, body := ts.get(t, "/get_server_info")
		var info struct {
			TPSize int `json:"tp_size"`
		}
		if err := json.Unmarshal(body, &info); code != 200 || err != nil || info.TPSize != tc.want {
			t.Errorf("TPSize %d: %d %v tp_size %d, want %d", tc.set, code, err, info.TPSize, tc.want)
		}
	}
}
