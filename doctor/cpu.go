package doctor

import (
	"fmt"

	"github.com/ktserve/kt/internal/units"
	"github.com/ktserve/kt/sysinfo"
)

func cpuChecks() []Check {
	return []Check{
		{"cpu.model", checkCPUModel},
		{"cpu.isa", checkISA},
		{"cpu.amx", checkAMX},
		{"cpu.kernel", checkKernel},
		{"cpu.cores", checkCores},
		{"cpu.numa", checkNUMA},
	}
}

func checkCPUModel(env *Env) []Result {
	c := env.Sys.CPU
	r := Result{Section: "cpu", Name: "cpu.model", Status: Pass, Detail: fmt.Sprintf("%s (%s)", c.Model, c.Vendor),
		Data: map[string]any{"model": c.Model, "vendor": c.Vendor}}
	if c.Model == "" {
		r.Status, r.Detail, r.Hint = Warn, "unknown CPU model", "/proc/cpuinfo was unreadable; kt still detects instruction sets through CPUID"
	}
	return []Result{r}
}

func checkISA(env *Env) []Result {
	isa := env.Sys.CPU.ISA
	have := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	detail := fmt.Sprintf("AVX2 %s, AVX-512 F/BW/VL %s/%s/%s, VNNI %s, BF16 %s, FP16 %s; AMX tile/int8/bf16 %s/%s/%s",
		have(isa.AVX2), have(isa.AVX512F), have(isa.AVX512BW), have(isa.AVX512VL), have(isa.AVX512VNNI),
		have(isa.AVX512BF16), have(isa.AVX512FP16), have(isa.AMXTile), have(isa.AMXInt8), have(isa.AMXBF16))
	r := Result{Section: "cpu", Name: "cpu.isa", Status: Pass, Detail: detail, Data: map[string]any{"flags": isa.Names()}}
	switch {
	case !(isa.AVX512F && isa.AVX512BW && isa.AVX512VL) && isa.AVX2:
		r.Status = Warn
		r.Hint = "no AVX-512: CPU experts run the AVX2 kernels, roughly half the speed of AVX-512 per core; an AVX-512 CPU (Intel Xeon Skylake-SP+, AMD Zen 4+) serves MoE experts much faster"
	case !isa.AVX2:
		r.Status = Warn
		r.Hint = "no AVX2: CPU experts run the portable kernels, which are very slow; use an x86-64 CPU with AVX2 or AVX-512"
	case !isa.AVX512BF16 && !isa.AMXBF16:
		r.Hint = "no AVX512_BF16 or AMX: BF16 weights must be widened to FP32 before each multiply, so BF16 experts run slower than on BF16-capable CPUs; INT8/INT4 experts (kt quant) use VNNI where present"
	}
	return []Result{r}
}

func checkAMX(env *Env) []Result {
	isa := env.Sys.CPU.ISA
	r := Result{Section: "cpu", Name: "cpu.amx"}
	if !isa.AMXTile {
		r.Status = Warn
		r.Detail = "this CPU has no AMX"
		r.Hint = "AMX (Intel Xeon Sapphire Rapids and later) multiplies BF16/INT8 expert throughput several-fold; kt uses the best AVX kernels instead"
		r.Data = map[string]any{"hardware": false, "granted": false}
		return []Result{r}
	}
	err := sysinfo.RequestAMX()
	env.AMXGranted = err == nil
	r.Data = map[string]any{"hardware": true, "granted": env.AMXGranted, "kernel_support": sysinfo.AMXSupportedByKernel()}
	if err != nil {
		r.Status = Fail
		r.Detail = fmt.Sprintf("AMX present but the OS refuses tile state: %v", err)
		r.Hint = "AMX needs Linux 5.16 or newer (arch_prctl ARCH_REQ_XCOMP_PERM); upgrade the kernel, or kt falls back to AVX-512 kernels"
		return []Result{r}
	}
	r.Status = Pass
	r.Detail = "AMX tile state granted by the OS (arch_prctl ARCH_REQ_XCOMP_PERM)"
	return []Result{r}
}

func checkKernel(env *Env) []Result {
	v := env.Sys.CPU.ISA.KernelVariant(env.AMXGranted)
	r := Result{Section: "cpu", Name: "cpu.kernel", Status: Pass, Detail: "CPU expert kernels: " + v, Data: map[string]any{"variant": v}}
	if v == sysinfo.VariantGeneric || v == sysinfo.VariantAVX2 {
		r.Status = Warn
		r.Hint = "expert throughput will be limited by the " + v + " kernels; see cpu.isa"
	}
	return []Result{r}
}

func checkCores(env *Env) []Result {
	c := env.Sys.CPU
	threadsPerCore := 1
	if c.PhysicalCores > 0 {
		threadsPerCore = c.LogicalCPUs / c.PhysicalCores
	}
	r := Result{Section: "cpu", Name: "cpu.cores", Status: Pass,
		Detail: fmt.Sprintf("%d physical cores, %d logical threads, %d socket(s); %d usable by this process", c.PhysicalCores, c.LogicalCPUs, c.Sockets, c.UsableCPUs),
		Data:   map[string]any{"physical_cores": c.PhysicalCores, "logical_cpus": c.LogicalCPUs, "sockets": c.Sockets, "usable_cpus": c.UsableCPUs}}
	suggest := max(1, c.PhysicalCores-2)
	switch {
	case c.PhysicalCores == 0:
		r.Status = Warn
		r.Detail = fmt.Sprintf("CPU topology unknown; %d CPUs usable", c.UsableCPUs)
		r.Hint = "/sys/devices/system/cpu was unreadable; set --kt-cpuinfer to the number of physical cores yourself"
	case c.UsableCPUs < c.LogicalCPUs:
		r.Status = Warn
		r.Hint = fmt.Sprintf("the CPU affinity mask (taskset, cgroup cpuset) hides %d CPUs; size --kt-cpuinfer to the usable physical cores", c.LogicalCPUs-c.UsableCPUs)
	case threadsPerCore > 1:
		r.Hint = fmt.Sprintf("expert kernels saturate a core with one thread: use --kt-cpuinfer %d (physical cores minus two for the scheduler and GPU feeding), not the thread count", suggest)
	default:
		r.Hint = fmt.Sprintf("suggested --kt-cpuinfer %d", suggest)
	}
	return []Result{r}
}

func checkNUMA(env *Env) []Result {
	nodes := env.Sys.NUMA
	if len(nodes) == 0 {
		return []Result{{Section: "cpu", Name: "cpu.numa", Status: Warn, Detail: "no NUMA information",
			Hint: "/sys/devices/system/node is missing; kt assumes one node"}}
	}
	var out []Result
	for _, n := range nodes {
		out = append(out, Result{Section: "cpu", Name: fmt.Sprintf("cpu.numa.node%d", n.ID), Status: Pass,
			Detail: fmt.Sprintf("CPUs %s; %s total, %s free", formatCPUList(n.CPUs), GiB(n.MemTotal), GiB(n.MemFree)),
			Data:   map[string]any{"cpus": n.CPUs, "mem_total": n.MemTotal, "mem_free": n.MemFree}})
	}
	if len(nodes) > 1 {
		out[0].Hint = fmt.Sprintf("%d NUMA nodes: run one expert thread pool per node (--kt-threadpool-count %d) so each reads its own memory", len(nodes), len(nodes))
	}
	return out
}

// formatCPUList renders sorted CPU ids compactly ("0-3,8"), or "none".
func formatCPUList(cpus []int) string {
	if len(cpus) == 0 {
		return "none"
	}
	return units.Ranges(cpus, ",")
}
