//go:build cgo

package arch

import (
	"errors"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/tp"
)

// openGPU opens the CUDA backend on o.BaseGPUID.
func openGPU(o Options) (backend.Backend, error) {
	g, err := cuda.NewBackend(cuda.Options{Ordinal: o.BaseGPUID, MemFractionStatic: o.MemFractionStatic})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// onGPU reports whether be is the CUDA backend.
func onGPU(be backend.Backend) bool {
	_, ok := be.(*cuda.Backend)
	return ok
}

// GPUCount is the number of GPUs the CUDA backend can see (0 when the
// driver or GPUs are missing).
func GPUCount() int {
	n, err := cuda.DeviceCount()
	if err != nil {
		return 0
	}
	return n
}

// openGPUGroup opens the CUDA backends of n ranks on GPUs o.BaseGPUID..
// and their NCCL communicators.
func openGPUGroup(o Options, n int) ([]backend.Backend, tp.Group, error) {
	return nil, nil, errors.New("the NCCL communicator is not built yet")
}

// GPUTensorParallel is the largest tensor-parallel size over GPUs: the
// GPU count when NCCL loads, else 1 and why not.
func GPUTensorParallel() (int, string) {
	if err := cuda.LoadLibraries().Err["nccl"]; err != nil {
		return 1, err.Error()
	}
	return GPUCount(), ""
}
