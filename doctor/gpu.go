package doctor

// This file holds the GPU checks. It is a placeholder that only looks for
// the NVIDIA kernel driver; the CUDA backend replaces gpuChecks with probes
// through the driver library loaded at run time (devices, compute
// capability, VRAM, PCIe link, cuBLAS/cuBLASLt, NVRTC, NCCL versions).

import (
	"os"
	"strings"
)

func gpuChecks() []Check {
	return []Check{{"gpu.driver", checkNVIDIADriver}}
}

func checkNVIDIADriver(env *Env) []Result {
	b, err := os.ReadFile("/proc/driver/nvidia/version")
	if err != nil {
		return []Result{{Section: "gpu", Name: "gpu.driver", Status: Warn,
			Detail: "no GPU: the NVIDIA kernel driver is not loaded (no /proc/driver/nvidia/version)",
			Hint:   "kt runs everything on the CPU here; for GPU offload install the NVIDIA driver and make the GPU visible (docker --gpus all)",
			Data:   map[string]any{"driver": false}}}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return []Result{{Section: "gpu", Name: "gpu.driver", Status: Warn,
		Detail: "NVIDIA kernel driver loaded: " + strings.TrimSpace(line),
		Hint:   "this kt build does not probe GPUs through CUDA yet, so it cannot list devices or libraries",
		Data:   map[string]any{"driver": true, "version_line": strings.TrimSpace(line)}}}
}
