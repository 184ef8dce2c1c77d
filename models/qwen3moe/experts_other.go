//go:build !(linux && amd64 && cgo)

package qwen3moe

import (
	"errors"

	"github.com/ktserve/kt/backend"
)

// expertEngine is unavailable in this build: the backend's MoE op runs.
type expertEngine struct{}

func newExpertEngine(*Runner, string) (*expertEngine, error) {
	return nil, errors.New("the CPU expert engine needs linux/amd64 with cgo")
}

func (*expertEngine) forward(int, backend.Tensor, backend.Tensor, backend.Tensor, backend.Tensor, int, int, int) error {
	return errors.New("no CPU expert engine")
}

func (*expertEngine) describe() string { return "" }

func (*expertEngine) close() {}
