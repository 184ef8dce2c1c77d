//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Report is what kt doctor and kt version say about CUDA on this machine.
type Report struct {
	Libraries Libraries
	Driver    int // CUDA version the driver supports, 0 if unknown
	NVRTC     string
	CuBLASLt  int
	NCCL      int
	GPUs      []Info
	Kernels   map[string]string // module -> compile status, when checked
	KernelErr error
	// EarlyLaunch says whether GPU ordinal launches kernels ahead of their
	// predecessors' end (Device.EarlyLaunch), when the kernels were checked.
	EarlyLaunch bool
	Err         error // why the GPU is not used, if it is not
}

// Check gathers the report. With compile set it also opens GPU ordinal and
// compiles every embedded kernel module (the "kernels compile" check).
func Check(ordinal int, compile bool) *Report {
	r := &Report{Libraries: *LoadLibraries()}
	r.CuBLASLt = CuBLASLtVersion()
	if maj, min, err := NVRTCVersion(); err == nil {
		r.NVRTC = fmt.Sprintf("%d.%d", maj, min)
	}
	if r.Libraries.NCCL != "" {
		r.NCCL = ncclVersion()
	}
	v, err := DriverVersion()
	if err != nil {
		r.Err = err
		return r
	}
	r.Driver = v
	n, err := DeviceCount()
	if err != nil {
		r.Err = err
		return r
	}
	for i := 0; i < n; i++ {
		info, err := Probe(i)
		if err != nil {
			r.Err = err
			return r
		}
		r.GPUs = append(r.GPUs, *info)
	}
	if n == 0 {
		r.Err = fmt.Errorf("%w: the driver reports no GPU", ErrUnavailable)
		return r
	}
	if err := r.Libraries.required(); err != nil {
		r.Err = err
		return r
	}
	if compile {
		d, err := Open(Options{Ordinal: ordinal, PoolBytes: 256 << 20})
		if err != nil {
			r.Err = err
			return r
		}
		defer d.Close()
		r.Kernels, r.KernelErr = d.CompileAll()
		r.EarlyLaunch = d.EarlyLaunch()
	}
	return r
}

func cudaVer(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Lines renders the report as "key: value" lines for kt version / doctor.
func (r *Report) Lines() []string {
	if e := r.Libraries.Err["driver"]; e != nil {
		return []string{"gpu: not used, running on the CPU: no NVIDIA driver library (" + e.Error() + ")"}
	}
	var out []string
	lib := func(name, path, key string) {
		if path != "" {
			out = append(out, fmt.Sprintf("%s: %s", name, path))
		} else if e := r.Libraries.Err[key]; e != nil {
			out = append(out, fmt.Sprintf("%s: not found (%v)", name, e))
		}
	}
	if r.Driver > 0 {
		out = append(out, fmt.Sprintf("cuda driver: supports CUDA %s", cudaVer(r.Driver)))
	}
	lib("cuda driver library", r.Libraries.Driver, "driver")
	if r.CuBLASLt > 0 {
		out = append(out, fmt.Sprintf("cublasLt: %d.%d.%d (%s)", r.CuBLASLt/10000, r.CuBLASLt/100%100, r.CuBLASLt%100, r.Libraries.CuBLASLt))
	} else {
		lib("cublasLt", "", "cublaslt")
	}
	if r.NVRTC != "" {
		out = append(out, fmt.Sprintf("nvrtc: %s (%s)", r.NVRTC, r.Libraries.NVRTC))
	} else {
		lib("nvrtc", "", "nvrtc")
	}
	if r.NCCL > 0 {
		out = append(out, fmt.Sprintf("nccl: %d.%d.%d (%s)", r.NCCL/10000, r.NCCL/100%100, r.NCCL%100, r.Libraries.NCCL))
	} else {
		lib("nccl", "", "nccl")
	}
	for _, g := range r.GPUs {
		link := g.PCIeLink
		if link == "" {
			link = "link not exposed"
		}
		drv := g.DriverRelease
		if drv == "" {
			drv = "?"
		}
		out = append(out, fmt.Sprintf("gpu %d: %s, compute %d.%d, %d SMs, %.1f GiB (%.1f GiB free), L2 %d MiB, PCI %s %s, driver %s",
			g.Ordinal, g.Name, g.Major, g.Minor, g.SMs, float64(g.TotalMem)/(1<<30), float64(g.FreeMem)/(1<<30), g.L2Bytes>>20, g.PCIBusID, link, drv))
	}
	if r.Kernels != nil || r.KernelErr != nil {
		if r.KernelErr != nil {
			out = append(out, fmt.Sprintf("kernels: FAILED to compile: %v", r.KernelErr))
		} else {
			mods := make([]string, 0, len(r.Kernels))
			for m := range r.Kernels {
				mods = append(mods, m)
			}
			sort.Strings(mods)
			for _, m := range mods {
				out = append(out, fmt.Sprintf("kernel %s: %s", m, r.Kernels[m]))
			}
		}
	}
	if r.Err != nil {
		why := r.Err.Error()
		if errors.Is(r.Err, ErrUnavailable) {
			why = strings.TrimPrefix(why, ErrUnavailable.Error()+": ")
		}
		out = append(out, "gpu: not used, running on the CPU: "+why)
	}
	return out
}

// VersionLines is the CUDA part of `kt version`: libraries found and GPUs,
// without opening a device.
func VersionLines() []string { return Check(0, false).Lines() }
