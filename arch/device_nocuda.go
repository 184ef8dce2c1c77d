//go:build !cgo

package arch

import (
	"errors"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/tp"
)

// errNoCUDA says why this build never uses a GPU.
var errNoCUDA = errors.New("CUDA unavailable: this kt was built without cgo (CGO_ENABLED=0), so it has no CUDA backend")

func openGPU(Options) (backend.Backend, error) { return nil, errNoCUDA }

func onGPU(backend.Backend) bool { return false }

// GPUCount is 0: this build has no CUDA backend.
func GPUCount() int { return 0 }

func openGPUGroup(Options, int) ([]backend.Backend, tp.Group, error) { return nil, nil, errNoCUDA }

// GPUTensorParallel is 1: this build has no CUDA backend.
func GPUTensorParallel() (int, string) { return 1, errNoCUDA.Error() }
