//go:build !cgo

package doctor

// Without cgo kt has no CUDA backend: one line says so.

func gpuChecks() []Check {
	return []Check{{"gpu.cuda", func(*Env) []Result {
		return []Result{{Section: "gpu", Name: "gpu.use", Status: Warn,
			Detail: "GPU not used: this kt was built without cgo (CGO_ENABLED=0), so it has no CUDA backend",
			Hint:   "build kt with cgo (CGO_ENABLED=1 and gcc) for GPU offload"}}
	}}}
}
