//go:build linux

package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeInterruptedWhileLoading starts kt serve on a model directory
// whose weight file is a FIFO nobody writes (opening it blocks forever),
// ends the context as SIGINT / SIGTERM would, and checks that kt serve
// returns at once, saying it was interrupted while loading.
func TestServeInterruptedWhileLoading(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "models", "qwen3moe-a")
	dir := t.TempDir()
	for _, name := range []string{"config.json", "generation_config.json"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "model.safetensors"), 0o644); err != nil {
		t.Skipf("no FIFO: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, []string{"--port", "0", "--model-path", dir, "--skip-tokenizer-init"}, io.Discard, io.Discard, nil)
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "interrupted while loading") {
			t.Fatalf("kt serve returned %v; want the interrupted load", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("kt serve did not return after its context ended during the load")
	}
	// unblock the abandoned load's open so the test leaves no goroutine stuck
	if f, err := os.OpenFile(filepath.Join(dir, "model.safetensors"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}
