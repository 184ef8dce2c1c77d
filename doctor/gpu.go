//go:build cgo

package doctor

// GPU checks: the CUDA driver, cuBLASLt, NVRTC and NCCL are probed through
// backend/cuda, which loads them at run time; each visible GPU is listed
// with its compute capability, memory and PCIe link; and the embedded
// kernels are compiled (or found in the cache) on GPU 0.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/internal/settings"
)

func gpuChecks() []Check {
	return []Check{{"gpu.cuda", checkCUDA}, {"gpu.tp", checkGPUTP}}
}

// checkGPUTP reports, for Env.TPSize > 1 (or on a machine of several
// GPUs), whether there are enough GPUs for the ranks, NCCL to connect them
// and peer access between each pair.
func checkGPUTP(env *Env) []Result {
	gpus, err := cuda.DeviceCount()
	n := env.TPSize
	if err != nil || (n <= 1 && gpus < 2) {
		return nil
	}
	r := Result{Section: "gpu", Name: "gpu.tp"}
	if n <= 1 {
		n = gpus
	}
	if n > gpus {
		r.Status, r.Detail = Fail, fmt.Sprintf("--tensor-parallel-size %d needs %d GPUs; %d found", n, n, gpus)
		r.Hint = "use a smaller size, or --device cpu for CPU ranks"
		return []Result{r}
	}
	if e := cuda.LoadLibraries().Err["nccl"]; e != nil {
		r.Status, r.Detail = Fail, fmt.Sprintf("tensor parallelism over %d GPUs needs NCCL: %v", n, e)
		r.Hint = "install libnccl2 (or PyTorch's nvidia-nccl wheel) or point " + settings.CUDALibDirs.Name + " at it"
		return []Result{r}
	}
	var missing []string
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			if a == b {
				continue
			}
			ok, err := cuda.PeerAccess(a, b)
			if err != nil {
				r.Status, r.Detail = Warn, "peer access unknown: "+err.Error()
				return []Result{r}
			}
			if !ok {
				missing = append(missing, fmt.Sprintf("%d->%d", a, b))
			}
		}
	}
	r.Data = map[string]any{"gpus": n, "no_peer_access": missing}
	if len(missing) > 0 {
		r.Status = Warn
		r.Detail = fmt.Sprintf("%d GPUs and NCCL for tensor parallelism; no peer access %s", n, strings.Join(missing, ", "))
		r.Hint = "NCCL then goes through host memory, which slows every all-reduce; check the topology with nvidia-smi topo -m"
		return []Result{r}
	}
	r.Status = Pass
	r.Detail = fmt.Sprintf("%d GPUs, NCCL, and peer access between every pair: tensor parallelism up to %d", n, n)
	return []Result{r}
}

func checkCUDA(env *Env) []Result {
	r := cuda.Check(0, true)
	var out []Result
	libs := r.Libraries
	if e := libs.Err["driver"]; e != nil {
		return []Result{{Section: "gpu", Name: "gpu.driver", Status: Warn,
			Detail: "no GPU: " + e.Error(),
			Hint:   "kt runs everything on the CPU here; for GPU offload install the NVIDIA driver and make the GPU visible (docker --gpus all)",
			Data:   map[string]any{"driver": false}}}
	}
	out = append(out, Result{Section: "gpu", Name: "gpu.driver", Status: Pass,
		Detail: fmt.Sprintf("CUDA driver %s supports CUDA %d.%d", libs.Driver, r.Driver/1000, r.Driver%1000/10),
		Data:   map[string]any{"driver": true, "cuda_version": r.Driver, "path": libs.Driver}})
	lib := func(name, key, path, version string) {
		if e := libs.Err[key]; e != nil {
			st := Fail
			if key == "nccl" {
				st = Warn // only needed for several GPUs
			}
			out = append(out, Result{Section: "gpu", Name: "gpu." + key, Status: st, Detail: name + " not found: " + e.Error(),
				Hint: "install the CUDA toolkit's libraries (or PyTorch's nvidia-* wheels) or point " + settings.CUDALibDirs.Name + " at them"})
			return
		}
		out = append(out, Result{Section: "gpu", Name: "gpu." + key, Status: Pass, Detail: fmt.Sprintf("%s %s (%s)", name, version, path),
			Data: map[string]any{"path": path, "version": version}})
	}
	lib("cuBLASLt", "cublaslt", libs.CuBLASLt, fmt.Sprintf("%d.%d.%d", r.CuBLASLt/10000, r.CuBLASLt/100%100, r.CuBLASLt%100))
	lib("NVRTC", "nvrtc", libs.NVRTC, r.NVRTC)
	lib("NCCL", "nccl", libs.NCCL, fmt.Sprintf("%d.%d.%d", r.NCCL/10000, r.NCCL/100%100, r.NCCL%100))
	for _, g := range r.GPUs {
		st, hint := Pass, ""
		if g.Major < 8 {
			st, hint = Warn, "kt's kernels target compute capability 8.0 and newer (bf16)"
		}
		link := g.PCIeLink
		if link == "" {
			link = "PCIe link not exposed"
		}
		out = append(out, Result{Section: "gpu", Name: fmt.Sprintf("gpu.device%d", g.Ordinal), Status: st, Hint: hint,
			Detail: fmt.Sprintf("GPU %d: %s, compute %d.%d, %d SMs, %s total, %s free, %s, driver %s",
				g.Ordinal, g.Name, g.Major, g.Minor, g.SMs, GiB(g.TotalMem), GiB(g.FreeMem), link, g.DriverRelease),
			Data: map[string]any{"name": g.Name, "compute": fmt.Sprintf("%d.%d", g.Major, g.Minor), "sms": g.SMs,
				"total_bytes": g.TotalMem, "free_bytes": g.FreeMem, "pci": g.PCIBusID, "pcie_link": g.PCIeLink}})
	}
	switch {
	case r.KernelErr != nil:
		out = append(out, Result{Section: "gpu", Name: "gpu.kernels", Status: Fail, Detail: "kernels do not compile: " + r.KernelErr.Error(),
			Hint: "check that NVRTC matches the driver (kt doctor lists both)"})
	case r.Kernels != nil:
		early := "on"
		if !r.EarlyLaunch {
			early = "off (needs compute 9.0 and a CUDA 12.3 driver; " + settings.CUDAPDL.Name + "=0 turns it off)"
		}
		out = append(out, Result{Section: "gpu", Name: "gpu.kernels", Status: Pass,
			Detail: fmt.Sprintf("%d kernel modules compile for GPU 0 (cached in %s); early launch %s", len(r.Kernels), cuda.DefaultKernelCacheDir(), early),
			Data:   map[string]any{"modules": r.Kernels, "early_launch": r.EarlyLaunch}})
	}
	if r.Err != nil {
		st := Fail
		if errors.Is(r.Err, cuda.ErrUnavailable) {
			st = Warn
		}
		out = append(out, Result{Section: "gpu", Name: "gpu.use", Status: st, Detail: "GPU not used, running on the CPU: " + r.Err.Error()})
	}
	return out
}
