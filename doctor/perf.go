//go:build linux && amd64 && cgo

package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ktserve/kt/internal/units"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/moe/expertsource"
)

// perfChecks measure the machine (kt doctor --measure): the memory read
// bandwidth that bounds CPU decode, the AMX tile rate that bounds the AMX
// prefill, and with a model the decode bound its routed experts give.
func perfChecks() []Check {
	return []Check{
		{"perf.read", checkReadBandwidth},
		{"perf.amx", checkTileRate},
		{"perf.decode", checkDecodeBound},
	}
}

// perfSamples is the number of samples each measurement takes (the median
// is reported: a shared machine's rates move from second to second).
const perfSamples = 5

// readProbeBytes is the read probe's buffer: far larger than any last-level
// cache.
const readProbeBytes = 1 << 30

func perfResult(name string) Result { return Result{Section: "perf", Name: name} }

func checkReadBandwidth(env *Env) []Result {
	if !env.Measure {
		return nil
	}
	r := perfResult("perf.read")
	threads := cpuexperts.PhysicalCores()
	p, err := cpuexperts.NewReadProbe(readProbeBytes, threads)
	if err != nil {
		r.Status, r.Detail = Warn, "read probe: "+oneLine(err)
		return []Result{r}
	}
	defer p.Close()
	for range perfSamples {
		if _, err := p.Sample(2); err != nil {
			r.Status, r.Detail = Warn, "read probe: "+oneLine(err)
			return []Result{r}
		}
	}
	smp := p.Samples()
	env.readGBps = p.Median() / 1e9
	r.Detail = fmt.Sprintf("memory read %.1f GB/s (median of %d samples, %.1f-%.1f; %d threads over %s): the bound of CPU decode, which streams the routed experts' weights",
		env.readGBps, len(smp), slices.Min(smp)/1e9, slices.Max(smp)/1e9, threads, GiB(readProbeBytes))
	r.Data = map[string]any{"read_gbps": env.readGBps, "threads": threads}
	return []Result{r}
}

func checkTileRate(env *Env) []Result {
	if !env.Measure || !cpuexperts.DetectFeatures().AMX {
		return nil // cpu.amx says why there is none
	}
	r := perfResult("perf.amx")
	cpus := cpuexperts.WorkerCPUs(cpuexperts.PhysicalCores())
	p, err := cpuexperts.NewTileProbe(cpus)
	if err != nil {
		r.Status, r.Detail = Warn, oneLine(err)
		r.Hint = "the OS must grant the AMX tile state (Linux 5.16 or later); kt uses the AVX-512 kernels meanwhile"
		return []Result{r}
	}
	for range perfSamples {
		for _, i8 := range []bool{false, true} {
			if _, err := p.Sample(i8); err != nil {
				r.Status, r.Detail = Warn, oneLine(err)
				return []Result{r}
			}
		}
	}
	bf, i8 := p.Median(false), p.Median(true)
	r.Detail = fmt.Sprintf("AMX tiles on %d cores: bf16 %.1f TFLOPS, int8 %.1f TOPS (medians of %d; the 2x2 tile block with operands reloaded from L1, the ceiling of the AMX prefill kernels)",
		len(cpus), bf, i8, perfSamples)
	r.Data = map[string]any{"bf16_tflops": bf, "int8_tops": i8, "cores": len(cpus)}
	if bf < 1.0*float64(len(cpus)) {
		r.Status = Warn
		r.Hint = fmt.Sprintf("%.2f bf16 TFLOPS per core, where one core with its tile unit to itself does about 2 (up to 2.27 measured on one core of kt's test machine): the cores share their tile units with other work (hyperthread siblings, other tenants of a VM), and the AMX prefill runs slower than on dedicated cores",
			bf/float64(len(cpus)))
	}
	return []Result{r}
}

// decodeMethods are the CPU expert formats whose decode bound perf.decode
// states (and RAWINT4 first for a pack-quantized INT4 checkpoint).
var decodeMethods = []cpuexperts.Method{cpuexperts.AMXBF16, cpuexperts.AMXINT8, cpuexperts.AMXINT4}

func checkDecodeBound(env *Env) []Result {
	if !env.Measure || env.ModelPath == "" || env.readGBps <= 0 {
		return nil
	}
	var layers, topK int
	var token func(cpuexperts.Method) int64 // routed-expert bytes per decoded token
	methods := decodeMethods
	if m := env.loadModel(); m.cfgErr == nil {
		c := m.cfg
		if c.NumExperts == 0 {
			return nil
		}
		if c.Int4GroupSize > 0 {
			methods = append([]cpuexperts.Method{cpuexperts.RAWINT4}, decodeMethods...)
		}
		layers, topK = c.NumMoELayers(), c.TopK
		token = func(meth cpuexperts.Method) int64 {
			return expertsource.TokenBytes(meth, c.HiddenSize, c.MoEIntermediateSize, topK, layers)
		}
	} else {
		// an MoE architecture kt does not serve: its routed experts still set the bound
		mm, err := expertsource.OpenMoEModel(env.ModelPath)
		if err != nil {
			return nil
		}
		layers, topK, token = len(mm.Layers), mm.Shape.TopK, mm.TokenBytes
	}
	r := perfResult("perf.decode")
	data := map[string]any{"read_gbps": env.readGBps}
	var parts []string
	for _, meth := range methods {
		bytes := float64(token(meth))
		tps := env.readGBps * 1e9 / bytes
		parts = append(parts, fmt.Sprintf("%s %s -> %.0f tok/s", meth, units.Bytes(int64(bytes)), tps))
		data[string(meth)] = map[string]any{"bytes_per_token": bytes, "tokens_per_s": tps}
	}
	r.Detail = fmt.Sprintf("routed experts read per token at batch 1 (%d MoE layers x top-%d), and the decode rate the measured %.1f GB/s allows with every one on the CPU: %s",
		layers, topK, env.readGBps, strings.Join(parts, ", "))
	r.Hint = "experts on the GPU (--kt-num-gpu-experts) and deferred ones (--kt-max-deferred-experts-per-token) lift the bound; the GPU's own work adds to each step"
	r.Data = data
	return []Result{r}
}
