package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ktserve/kt/engine"
	"github.com/ktserve/kt/internal/fakemodel"
)

// TestOfficialSDKs runs the official OpenAI and Anthropic JavaScript
// clients (testdata/sdk, pinned by its package-lock.json) against a server
// on the fake model: chat completions, responses.create and
// responses.stream, messages.create, messages.stream and countTokens, and
// their typed errors. It needs node and the clients installed (npm ci in
// server/testdata/sdk).
func TestOfficialSDKs(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir := filepath.Join("testdata", "sdk")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Skip("the clients are not installed: run npm ci in server/testdata/sdk")
	}
	const key = "sk-kt-test"
	ts := newTestServer(t, fakemodel.Config{Script: agentScript()}, engine.Config{}, func(o *Options) { o.APIKey = key })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk.test.mjs", ts.url, key)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node sdk.test.mjs: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
