//go:build cgo

package arch

import (
	"fmt"

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
	var gs []*cuda.Backend
	closeAll := func() {
		for _, g := range gs {
			g.Close()
		}
	}
	for r := range n {
		g, err := cuda.NewBackend(cuda.Options{Ordinal: o.BaseGPUID + r, MemFractionStatic: o.MemFractionStatic})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("rank %d on GPU %d: %w", r, o.BaseGPUID+r, err)
		}
		gs = append(gs, g)
	}
	grp, err := cuda.NewNCCLGroup(gs)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	bes := make([]backend.Backend, n)
	for r, g := range gs {
		bes[r] = g
	}
	return bes, grp, nil
}

// GPUTensorParallel is the largest tensor-parallel size over GPUs: the
// GPU count when NCCL loads, else 1 and why not.
func GPUTensorParallel() (int, string) {
	if err := cuda.LoadLibraries().Err["nccl"]; err != nil {
		return 1, err.Error()
	}
	return GPUCount(), ""
}
