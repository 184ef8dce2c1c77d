//go:build linux && amd64 && cgo

package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/cpuexperts"
	"github.com/ktserve/kt/moe/enginebench"
	"github.com/ktserve/kt/sysinfo"
)

// ---------------------------------------------------------------- moe

type moeBenchOpts struct {
	models, methods, tokens                               string
	modelPaths                                            []string
	threads, pools                                        int
	isa                                                   string
	minTime                                               time.Duration
	compareTorch                                          bool
	python, jsonOut                                       string
	bwBytes                                               int64
	amxKBlock, amxPrefetch                                int
	amxKBlockDown                                         int
	amxSlab                                               int64
	amxSlabGroup, amxI4Block, amxI4Prefetch, amxMinTokens int
	amxI4Fused, amxI4FusedFirst                           int
	amxPFTiles, amxNext, amxT1                            int
	decPrefetch, chunk                                    int
	phases, trace                                         bool
	slotF32, yCached, outCached, hF32                     bool
	rounds                                                int
	spinWait, gap                                         time.Duration
	f32IO                                                 bool
	prefetchHit                                           float64
	ownedDecode, missStream                               bool
	// memAvail reports the memory benchLayers may still use (nil: no
	// check; runMoEBench sets memAvailable).
	memAvail func() int64
}

var moeOpts moeBenchOpts

func init() {
	addBenchType("moe", benchType{
		short: "one MoE layer on the CPU expert engine: time, weight GB/s vs measured read bandwidth, TFLOPS vs PyTorch",
		flags: func(cmd *cobra.Command) {
			f := cmd.Flags()
			f.StringVar(&moeOpts.models, "model", "", "comma-separated layer shapes by name ("+strings.Join(enginebench.BenchShapeNames(), ", ")+") or all (the first two; the default without --model-path)")
			f.StringArrayVar(&moeOpts.modelPaths, "model-path", nil, "also bench the routed-expert layer that DIR/config.json states, any MoE architecture (repeatable)")
			f.StringVar(&moeOpts.methods, "methods", "AMXINT4,AMXINT8,AMXBF16,BF16", "comma-separated methods ("+methodNames()+")")
			f.StringVar(&moeOpts.tokens, "tokens", "1,4,32,512,4096", "comma-separated tokens per layer")
			f.IntVar(&moeOpts.threads, "cpuinfer", 0, "worker threads (0 = physical cores, KT's guidance for --kt-cpuinfer; the hybrid leaves one to the GPU thread)")
			f.IntVar(&moeOpts.pools, "threadpool-count", 1, "thread pools (NUMA nodes)")
			f.StringVar(&moeOpts.isa, "isa", "auto", "kernel level: auto, amx, avx512, avx2")
			f.DurationVar(&moeOpts.minTime, "min-time", 300*time.Millisecond, "minimum time per measurement")
			f.BoolVar(&moeOpts.compareTorch, "compare-torch", false, "also run PyTorch's expert-by-expert bf16 MoE (needs python3 + torch)")
			f.IntVar(&moeOpts.rounds, "rounds", 1, "measure everything this many times, the baseline right before the engine each time; report medians")
			f.StringVar(&moeOpts.python, "python", "python3", "python interpreter for --compare-torch")
			f.StringVar(&moeOpts.jsonOut, "json", "", "also write results as JSON to this file")
			f.Int64Var(&moeOpts.bwBytes, "bw-bytes", 1<<30, "buffer size of the read-bandwidth probe")
			f.IntVar(&moeOpts.amxKBlock, "amx-kblock", 0, "AMX prefill K block in 1 KiB tile steps (0 = default, -1 = whole K)")
			f.IntVar(&moeOpts.amxKBlockDown, "amx-kblock-down", 0, "the down projection's AMX prefill K block (0 = as --amx-kblock, -1 = whole K; Config.AMXKBlockDown)")
			f.Int64Var(&moeOpts.amxSlab, "amx-slab", 0, "gate/up AMX prefill: activation bytes of one kernel call above which K runs in slabs (0 = default 1 MiB, -1 = never; Config.AMXSlabBytes)")
			f.IntVar(&moeOpts.amxSlabGroup, "amx-slab-group", 0, "32-row blocks per K-slab group (0 = as many as the 512 KiB park holds; Config.AMXSlabGroup)")
			f.IntVar(&moeOpts.amxI4Prefetch, "amx-int4-prefetch", 0, "AMXINT4/INT4_KGROUP prefill: bytes ahead the int4 unpack prefetches its panels (0 = default: 2048 where the unpack is fused and for INT4_KGROUP, none for AMXINT4's whole-panel unpack; -1 = none; Config.AMXInt4Prefetch)")
			f.IntVar(&moeOpts.amxMinTokens, "amx-min-tokens", 0, "fewest tokens of an expert that take the AMX prefill kernels (0 = default: 8, 4 for AMXINT4; Config.AMXMinTokens)")
			f.IntVar(&moeOpts.amxI4Fused, "amx-int4-fused", 0, "AMXINT4/INT4_KGROUP prefill: calls of at most this many tokens unpack inside the tile loop (0 = default 32; -1 = never; Config.AMXInt4Fused)")
			f.IntVar(&moeOpts.amxI4FusedFirst, "amx-int4-fused-first", 0, "AMXINT4/INT4_KGROUP prefill: calls of more than 32 tokens fuse the unpack with their first 32 tokens: 0 = AMXINT4 only (default), 1 = both, -1 = neither (Config.AMXInt4FusedFirst)")
			f.IntVar(&moeOpts.amxI4Block, "amx-int4-block", 0, "AMXINT4 prefill: int8 tile steps (64 columns) unpacked and run at a time (0 = the whole K; Config.AMXInt4Block)")
			f.IntVar(&moeOpts.amxPrefetch, "amx-prefetch", 0, "AMX prefill tile prefetch distance in tile steps (0 = default, -1 = none)")
			f.IntVar(&moeOpts.decPrefetch, "decode-prefetch", 0, "int8/int4 one-token decode prefetch distance in bytes (0 = default, -1 = none)")
			f.IntVar(&moeOpts.amxPFTiles, "amx-prefetch-tiles", 0, "tiles the AMX prefill prefetch covers: 1 = A, 2 = B, 0/3 = both")
			f.IntVar(&moeOpts.amxT1, "amx-tile-t1", 0, "AMX prefill tiles loaded with the T1 hint (tileloaddt1): 1 = A, 2 = B, 3 = both, -1 = none, 0 = default (bf16 B)")
			f.IntVar(&moeOpts.amxNext, "amx-next-lines", 0, "AMX prefill: lines of the next call's weights prefetched into L2 per tile step (0 = by format: 4 bf16, none int8; -1 = none)")
			f.IntVar(&moeOpts.chunk, "prefill-chunk", 0, "tokens of one expert per prefill kernel call (0 = by format: 128 bf16, 512 int8)")
			f.BoolVar(&moeOpts.phases, "phases", false, "also print the time per task phase (route, convert, gather, gate/up, quantize, down, merge, fused)")
			f.BoolVar(&moeOpts.trace, "trace", false, "time decode tasks per thread and print where the time goes (hand-off, start, tail)")
			f.BoolVar(&moeOpts.hF32, "intermediate-f32", false, "int8 methods: keep h in f32 until quantized (default bf16; Config.IntermediateF32)")
			f.BoolVar(&moeOpts.yCached, "slot-outputs-cached", false, "store the per-slot down outputs through the caches (Config.SlotOutputsCached)")
			f.BoolVar(&moeOpts.outCached, "output-cached", false, "store the layer's output rows through the caches (Config.OutputCached)")
			f.BoolVar(&moeOpts.slotF32, "slot-outputs-f32", false, "keep the per-slot down outputs in f32 (default bf16 for bf16/int8 activations; Config.SlotOutputsF32)")
			f.BoolVar(&moeOpts.f32IO, "f32-io", false, "moe: f32 activations in and out, as the hybrid step hands its pinned rows over (default bf16)")
			f.DurationVar(&moeOpts.gap, "gap", 0, "the caller waits this long (spinning) between tasks, as the hybrid step waits for a GPU piece; times are the tasks' own")
			f.Float64Var(&moeOpts.prefetchHit, "prefetch-hit", -1, "with --gap: as each gap begins, prefetch the next task's predicted experts, this fraction of them right (as the hybrid step's next-layer prediction; < 0 = no prefetch)")
			f.BoolVar(&moeOpts.ownedDecode, "owned-decode", false, "one-token tasks: workers take the gate/up blocks they own first, which the prefetch reads on them (Config.OwnedDecode)")
			f.BoolVar(&moeOpts.missStream, "decode-miss-stream", false, "with --owned-decode: workers run the prefetched experts' blocks first while their kernels prefetch the others' (Config.DecodeMissStream)")
			f.DurationVar(&moeOpts.spinWait, "spin-wait", 0, "engine threads spin this long before sleeping (0 = default, -1ns = sleep at once)")
		},
		run: runMoEBench,
	})
}

func methodNames() string { return strings.Join(cpuExpertMethods(), ", ") }

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad token count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

type moeRecord struct {
	Model        string  `json:"model"`
	Method       string  `json:"method"`
	Kernels      string  `json:"kernels"`
	Tokens       int     `json:"tokens"`
	MsPerLayer   float64 `json:"ms_per_layer"`
	WeightGBps   float64 `json:"weight_gbps"`
	ReadGBps     float64 `json:"read_gbps"`      // median of the shape's probe samples
	ReadNearGBps float64 `json:"read_near_gbps"` // the sample taken right before this measurement
	// Disturbed is set when ReadNearGBps is under disturbedFraction of the median.
	Disturbed bool    `json:"disturbed,omitempty"`
	TFLOPS    float64 `json:"tflops"`
	TorchTF   float64 `json:"torch_tflops,omitempty"` // median of the rounds' baseline runs
	// XTorch is the median over the rounds of TFLOPS ÷ the baseline run
	// right before it; XTorchMin/Max their range.
	XTorch    float64 `json:"xtorch,omitempty"`
	XTorchMin float64 `json:"xtorch_min,omitempty"`
	XTorchMax float64 `json:"xtorch_max,omitempty"`
	// XBF16 is, for another method than AMXBF16 measured in the same
	// rounds, the median over the rounds of AMXBF16's time ÷ this method's
	// time in that round (AMXINT8 ÷ AMXBF16, say); XBF16Min/Max
	// their range.
	XBF16    float64 `json:"x_amxbf16,omitempty"`
	XBF16Min float64 `json:"x_amxbf16_min,omitempty"`
	XBF16Max float64 `json:"x_amxbf16_max,omitempty"`
	// TileTF is the median of the tile probe's samples taken right before
	// this row's rounds (rows whose prefill runs on AMX tiles with at least
	// 32 rows per expert on average); XTile the median over the rounds of
	// TFLOPS ÷ that round's sample, XTileMin/Max their range; TileXTorch
	// the median over the rounds of the sample ÷ the baseline: the xtorch a
	// kernel running at the tile probe's rate would have reached.
	TileTF     float64   `json:"tile_tflops,omitempty"`
	XTile      float64   `json:"x_tile,omitempty"`
	XTileMin   float64   `json:"x_tile_min,omitempty"`
	XTileMax   float64   `json:"x_tile_max,omitempty"`
	TileXTorch float64   `json:"tile_xtorch,omitempty"`
	Rounds     int       `json:"rounds"`
	RoundMs    []float64 `json:"round_ms"` // every round's time, in round order
	Layers     int       `json:"layers"`
	// PhaseMs is the time per task of each phase (cpuexperts.PhaseNames).
	PhaseMs map[string]float64 `json:"phase_ms,omitempty"`
	// Trace is the per-thread timing of the decode tasks (--trace).
	Trace *cpuexperts.TaskTrace `json:"trace,omitempty"`
	// PrefetchKB and PrefetchReadKB are the KB per task that the gap's
	// prefetch (--prefetch-hit) was to read and read before the task stopped it.
	PrefetchKB     float64 `json:"prefetch_kb,omitempty"`
	PrefetchReadKB float64 `json:"prefetch_read_kb,omitempty"`
}

// moeShapes resolves --model (comma-separated names, or all; "" is all
// unless paths are given) and --model-path (each directory's config.json,
// any MoE architecture) into the layer shapes to bench, in that order.
func moeShapes(models string, paths []string) ([]enginebench.BenchShape, error) {
	var shapes []enginebench.BenchShape
	if models == "" && len(paths) == 0 {
		models = "all"
	}
	for _, n := range strings.Split(models, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case strings.EqualFold(n, "all"):
			shapes = append(shapes, enginebench.BenchShapes...)
		default:
			s, ok := enginebench.LookupBenchShape(n)
			if !ok {
				return nil, fmt.Errorf("unknown --model %q (known: %s, all; or --model-path DIR for any model's config.json)", n, strings.Join(enginebench.BenchShapeNames(), ", "))
			}
			shapes = append(shapes, s)
		}
	}
	for _, dir := range paths {
		ms, err := modelconfig.LoadMoEShape(dir)
		if err != nil {
			return nil, fmt.Errorf("--model-path: %w", err)
		}
		name := filepath.Base(filepath.Clean(dir))
		if ms.Architecture != "" {
			name += " (" + ms.Architecture + ")"
		}
		shapes = append(shapes, enginebench.BenchShape{Name: name, Experts: ms.Experts, Hidden: ms.Hidden, Intermediate: ms.Intermediate, TopK: ms.TopK})
	}
	return shapes, nil
}

// shapeMethods is the methods whose layout constraints shape s over pools
// thread pools meets (cpuexperts.CheckShape); each one left out is named on
// w with the reason. No method left is an error.
func shapeMethods(s enginebench.BenchShape, methods []cpuexperts.Method, pools int, w io.Writer) ([]cpuexperts.Method, error) {
	var ok []cpuexperts.Method
	var why []string
	for _, m := range methods {
		if err := cpuexperts.CheckShape(m, s.Hidden, s.Intermediate, pools); err != nil {
			fmt.Fprintf(w, "# %s: %s skipped: %v\n", s.Name, m, err)
			why = append(why, fmt.Sprintf("%s: %v", m, err))
			continue
		}
		ok = append(ok, m)
	}
	if len(ok) == 0 {
		return nil, fmt.Errorf("%s: no method can run this layer (%s)", s.Name, strings.Join(why, "; "))
	}
	return ok, nil
}

// benchMemReserve is the memory kt bench leaves free beside its layers:
// the batches, the read probe, PyTorch's baseline and the system.
const benchMemReserve = 4 << 30

// benchLayers builds enough layers of random weights that together they
// exceed the last-level cache eight times (at most 16), so that a
// round-robin over them reads weights from memory, as a real model does;
// fewer where the memory available (avail reports it, in bytes; nil: no
// limit) would not hold them, and an error naming the sizes where it would
// not hold one.
func benchLayers(e *cpuexperts.Engine, s enginebench.BenchShape, m cpuexperts.Method, llc int64, avail func() int64, log io.Writer) ([]*cpuexperts.Layer, error) {
	need := enginebench.LayerBytesEstimate(s, m)
	if avail != nil {
		if a := avail(); a > 0 && need > a-benchMemReserve {
			return nil, fmt.Errorf("one %s layer of %s takes ~%.1f GB; %.1f GB of memory is available (%.0f GB kept free): a smaller format takes less (AMXINT8 half, AMXINT4 a quarter of bf16), and --rounds 1 builds one method's layers at a time",
				m, s.Name, float64(need)/1e9, float64(a)/1e9, float64(benchMemReserve)/1e9)
		}
	}
	var layers []*cpuexperts.Layer
	short := false
	for {
		l, err := enginebench.SyntheticLayer(e, s, m, uint64(len(layers)+1))
		if err != nil {
			closeLayers(layers)
			return nil, err
		}
		layers = append(layers, l)
		if int64(len(layers))*l.WeightBytes() >= 8*llc || len(layers) >= 16 {
			break
		}
		if avail != nil {
			if a := avail(); a > 0 && l.WeightBytes() > a-benchMemReserve {
				short = true
				break
			}
		}
	}
	fmt.Fprintf(log, "# %s: %d layer(s) of %.0f MB round-robin (last-level cache %d MB)\n", m, len(layers), float64(layers[0].WeightBytes())/1e6, llc>>20)
	if short {
		fmt.Fprintf(log, "# %s: memory held the round-robin to %d layer(s), %.1f× the last-level cache: weights may partly come from it\n",
			m, len(layers), float64(int64(len(layers))*layers[0].WeightBytes())/float64(llc))
	}
	return layers, nil
}

// memAvailable is the memory this process may still allocate without
// swapping (MemAvailable, capped by the cgroup limit when one is set).
func memAvailable() int64 { return sysinfo.DetectMemory().EffectiveMemory() }

func closeLayers(ls []*cpuexperts.Layer) {
	for _, l := range ls {
		l.Close()
	}
}

func runMoEBench(cmd *cobra.Command, w io.Writer) error {
	o := moeOpts
	o.memAvail = memAvailable
	if o.threads == 0 {
		// one layer on the CPU alone, nothing else to run: every physical
		// core, as KTransformers advises for --kt-cpuinfer and as PyTorch's
		// own default uses (the engine's default, for serving beside a GPU,
		// leaves one core to the thread that drives it)
		o.threads = cpuexperts.PhysicalCores()
	}
	tokens, err := parseInts(o.tokens)
	if err != nil {
		return err
	}
	var methods []cpuexperts.Method
	for _, s := range strings.Split(o.methods, ",") {
		m, err := cpuexperts.ParseMethod(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		methods = append(methods, m)
	}
	shapes, err := moeShapes(o.models, o.modelPaths)
	if err != nil {
		return err
	}
	maxTok := 0
	for _, t := range tokens {
		maxTok = max(maxTok, t)
	}
	fmt.Fprintf(w, "cpu features: %s\n", cpuexperts.DetectFeatures())
	llc := enginebench.LastLevelCache()
	if llc == 0 {
		llc = 256 << 20
	}
	var records []moeRecord
	for _, s := range shapes {
		methods, err := shapeMethods(s, methods, o.pools, w)
		if err != nil {
			return err
		}
		e, err := cpuexperts.NewEngine(cpuexperts.Config{
			Threads: o.threads, Pools: o.pools, ISA: cpuexperts.ISA(o.isa), AMXKBlock: o.amxKBlock, AMXKBlockDown: o.amxKBlockDown, AMXSlabBytes: o.amxSlab, AMXSlabGroup: o.amxSlabGroup, AMXInt4Block: o.amxI4Block, AMXInt4Prefetch: o.amxI4Prefetch, AMXInt4Fused: o.amxI4Fused, AMXInt4FusedFirst: o.amxI4FusedFirst, AMXMinTokens: o.amxMinTokens, AMXPrefetch: o.amxPrefetch,
			DecodePrefetch: o.decPrefetch, PrefillChunk: o.chunk, AMXPrefetchTiles: o.amxPFTiles, AMXTileT1: o.amxT1, AMXNextLines: o.amxNext,
			Trace: o.trace, SlotOutputsF32: o.slotF32, SlotOutputsCached: o.yCached, IntermediateF32: o.hF32, OutputCached: o.outCached, OwnedDecode: o.ownedDecode, DecodeMissStream: o.missStream, SpinWait: o.spinWait,
			MaxTokens: maxTok, TopK: s.TopK, Experts: s.Experts, Hidden: s.Hidden, Intermediate: s.Intermediate,
		})
		if err != nil {
			return err
		}
		threads := e.Config().Threads
		probeThreads := max(cpuexperts.PhysicalCores(), threads)
		probe, err := cpuexperts.NewReadProbe(o.bwBytes, probeThreads)
		if err != nil {
			e.Close()
			return err
		}
		recs, err := benchShape(e, probe, newBenchTiles(e, methods, w), s, methods, tokens, llc, o, w)
		probe.Close()
		e.Close()
		if err != nil {
			return err
		}
		records = append(records, recs...)
	}
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(records, "", "  ")
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", o.jsonOut, err)
		}
	}
	return nil
}

// tileSampler is what kt bench needs of cpuexperts.TileProbe (tests give
// a stand-in: the dev machines have no AMX).
type tileSampler interface {
	Sample(i8 bool) (float64, error)
	Samples(i8 bool) []float64
	Cores() int
}

// benchTiles is the tile probe of one shape's measurements and the rule for
// which method's rows it samples, and with which tile format.
type benchTiles struct {
	probe  tileSampler
	format func(cpuexperts.Method) (i8, ok bool)
}

// newBenchTiles makes the tile probe over the engine's worker CPUs when one
// of methods runs its prefill on AMX tiles; nil (and why, on w) otherwise.
func newBenchTiles(e *cpuexperts.Engine, methods []cpuexperts.Method, w io.Writer) *benchTiles {
	if !slices.ContainsFunc(methods, func(m cpuexperts.Method) bool { _, ok := e.TileFormat(m); return ok }) {
		return nil
	}
	p, err := cpuexperts.NewTileProbe(e.CPUs())
	if err != nil {
		fmt.Fprintf(w, "tile probe unavailable: %v\n", err)
		return nil
	}
	return &benchTiles{probe: p, format: e.TileFormat}
}

// tileRows is whether a row of t tokens fills the prefill kernels' 32-row
// tile blocks on average (t·k ≥ 32 per expert): the rows the tile probe is
// sampled for.
func tileRows(s enginebench.BenchShape, t int) bool { return t*s.TopK >= 32*s.Experts }

// sample takes the tile probe's sample for a row of method m at t tokens
// (0 where it takes none).
func (bt *benchTiles) sample(s enginebench.BenchShape, m cpuexperts.Method, t int) (float64, error) {
	if bt == nil || !tileRows(s, t) {
		return 0, nil
	}
	i8, ok := bt.format(m)
	if !ok {
		return 0, nil
	}
	return bt.probe.Sample(i8)
}

// print states the tile probe's samples and, for every record it sampled,
// the rate against it: the whole task, and with --phases its gate/up and
// down phases (their flops over their time), and the probe ÷ the baseline.
func (bt *benchTiles) print(w io.Writer, s enginebench.BenchShape, records []moeRecord) {
	if bt == nil {
		return
	}
	var parts []string
	for _, f := range []struct {
		i8   bool
		name string
	}{{false, "bf16"}, {true, "int8"}} {
		if smp := bt.probe.Samples(f.i8); len(smp) > 0 {
			parts = append(parts, fmt.Sprintf("%s median %.2f TFLOPS (%d samples, %.2f-%.2f)", f.name, cpuexperts.Median(smp), len(smp), slices.Min(smp), slices.Max(smp)))
		}
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(w, "tile probe (the 2x2 tile block every AMX prefill kernel runs, its operands reloaded from L1: one tile load per product; %d cores at once, a sample before each prefill row): %s\n",
		bt.probe.Cores(), strings.Join(parts, "; "))
	for _, rec := range records {
		if rec.TileTF == 0 {
			continue
		}
		fmt.Fprintf(w, "%s at %d tokens: %.2f TFLOPS, %.0f%% of the tile probe (median of the rounds, %.0f-%.0f%%)", rec.Method, rec.Tokens, rec.TFLOPS,
			100*rec.XTile, 100*rec.XTileMin, 100*rec.XTileMax)
		pairs := float64(rec.Tokens) * float64(s.TopK)
		mm := 2 * pairs * float64(s.Hidden) * float64(s.Intermediate) // one projection's flops
		for _, ph := range []struct {
			name  string
			flops float64
		}{{"gate/up", 2 * mm}, {"down", mm}} {
			if ms := rec.PhaseMs[ph.name]; ms > 0 {
				fmt.Fprintf(w, "; %s %.0f%%", ph.name, 100*ph.flops/(ms*1e-3)/1e12/rec.TileTF)
			}
		}
		if rec.TileXTorch > 0 {
			fmt.Fprintf(w, "; tile probe ÷ torch %.2fx (the xtorch of a kernel at the probe's rate)", rec.TileXTorch)
		}
		fmt.Fprintln(w)
	}
}

// probeReps is the number of passes over the probe buffer per sample.
const probeReps = 2

// disturbedFraction marks a row whose neighbouring probe sample read under
// this fraction of the median: the machine was busy with something else.
const disturbedFraction = 0.7

// torchSettle is the pause after a PyTorch measurement before the engine's:
// PyTorch's OpenMP threads spin a while after their last parallel region.
const torchSettle = 200 * time.Millisecond

// benchShape measures every method and token count on one layer shape, in
// o.rounds rounds: in each round and for each token count the PyTorch
// baseline (--compare-torch) runs first, then every method (one round:
// the baseline at every token count, then method by method). A record holds
// the round with the median time; its xtorch is the median over the rounds
// of the engine's rate ÷ the baseline's rate measured right before it, so a
// machine whose speed drifts within the run moves both sides of each
// ratio. The read-bandwidth probe takes three samples first and one right
// before every measurement, so its samples are spread over the same minutes
// as the measurements; %read is taken against the median of all of them,
// and the sample next to each measurement is reported beside it.
//
// tiles (nil: none) takes a sample of the AMX tile unit's rate before the
// read probe's for every row whose prefill runs on tiles, and each such
// row's TFLOPS is stated against it.
func benchShape(e *cpuexperts.Engine, probe *cpuexperts.ReadProbe, tiles *benchTiles, s enginebench.BenchShape, methods []cpuexperts.Method,
	tokens []int, llc int64, o moeBenchOpts, w io.Writer) ([]moeRecord, error) {
	threads := e.Config().Threads
	for range 3 {
		if _, err := probe.Sample(probeReps); err != nil {
			return nil, err
		}
	}
	var ts *torchServer
	if o.compareTorch {
		var err error
		if ts, err = startTorch(o.python, s, threads); err != nil {
			fmt.Fprintf(w, "pytorch baseline unavailable: %v\n", err)
		} else {
			defer func() {
				if ts != nil {
					ts.close()
				}
			}()
		}
	}
	rounds := max(o.rounds, 1)
	// The order of the measurements: with one round method by method, each
	// method's layers built, measured at every token count and freed (the
	// memory of one method's round-robin set); with more, round by round and
	// token count by token count every method right after one baseline run,
	// so every method's layers stay built (the sum of the sets).
	keep := rounds > 1
	type step struct{ r, ti, mi int }
	var steps []step
	if keep {
		for r := range rounds {
			for ti := range tokens {
				for mi := range methods {
					steps = append(steps, step{r, ti, mi})
				}
			}
		}
	} else {
		for mi := range methods {
			for ti := range tokens {
				steps = append(steps, step{0, ti, mi})
			}
		}
	}
	layers := make([][]*cpuexperts.Layer, len(methods))
	nlayers := make([]int, len(methods))
	defer func() {
		for _, ls := range layers {
			closeLayers(ls)
		}
	}()
	torch := make([][]torchResult, len(tokens))  // [token][round]
	points := make([][][]moePoint, len(methods)) // [method][token][round]
	for i := range points {
		points[i] = make([][]moePoint, len(tokens))
	}
	for _, st := range steps {
		t := tokens[st.ti]
		if ts != nil && len(torch[st.ti]) == st.r { // this round's baseline at t, before the first method
			tr, err := ts.measure(t)
			if err != nil {
				fmt.Fprintf(w, "pytorch baseline unavailable: %v\n", err)
				ts.close()
				ts = nil
			} else {
				torch[st.ti] = append(torch[st.ti], tr)
				time.Sleep(torchSettle)
			}
		}
		if layers[st.mi] == nil {
			ls, err := benchLayers(e, s, methods[st.mi], llc, o.memAvail, w)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", s.Name, methods[st.mi], err)
			}
			layers[st.mi], nlayers[st.mi] = ls, len(ls)
		}
		tile, err := tiles.sample(s, methods[st.mi], t)
		if err != nil {
			return nil, err
		}
		near, err := probe.Sample(probeReps)
		if err != nil {
			return nil, err
		}
		r, err := enginebench.Bench(layers[st.mi], t, s.TopK, enginebench.BenchOptions{MinTime: o.minTime, Gap: o.gap,
			Seed: 7, F32IO: o.f32IO, PrefetchHit: o.prefetchHit})
		if err != nil {
			return nil, err
		}
		p := moePoint{r: r, near: near, tile: tile}
		if k := len(torch[st.ti]); k > 0 {
			p.torch = torch[st.ti][k-1].TFLOPS
		}
		points[st.mi][st.ti] = append(points[st.mi][st.ti], p)
		if !keep && st.ti == len(tokens)-1 {
			closeLayers(layers[st.mi])
			layers[st.mi] = nil
		}
	}
	var records []moeRecord
	for mi := range methods {
		for ti := range tokens {
			records = append(records, moeRecordOf(s, points[mi][ti], nlayers[mi]))
		}
	}
	if keep {
		setXBF16(records)
	}
	smp := probe.Samples()
	med := probe.Median() / 1e9
	fmt.Fprintf(w, "\n%s: %d experts, hidden %d, intermediate %d, top-%d; %d threads in %d pool(s)\n",
		s.Name, s.Experts, s.Hidden, s.Intermediate, s.TopK, threads, e.Config().Pools)
	fmt.Fprintf(w, "read bandwidth: median %.1f GB/s of %d samples interleaved with the measurements (min %.1f, max %.1f; %d threads, %d MiB)\n",
		med, len(smp), slices.Min(smp)/1e9, slices.Max(smp)/1e9, probe.Threads(), o.bwBytes>>20)
	if rounds > 1 {
		fmt.Fprintf(w, "%d rounds: each row is the round of median time; xtorch is the median of the rounds' ratios to the baseline run right before them (range: lowest-highest)\n", rounds)
	}
	fmt.Fprintf(w, "%-12s %7s %11s %10s %7s %9s %8s %9s %7s  %s\n", "method", "tokens", "ms/layer", "weight GB/s", "%read",
		"near GB/s", "TFLOPS", "torch TF", "xtorch", "kernels")
	disturbed := 0
	for i := range records {
		rec := &records[i]
		rec.ReadGBps = med
		rec.Disturbed = rec.ReadNearGBps < disturbedFraction*med
		tt, x := "-", "-"
		if rec.TorchTF > 0 {
			tt, x = fmt.Sprintf("%.3f", rec.TorchTF), fmt.Sprintf("%.2f", rec.XTorch)
		}
		mark := " "
		if rec.Disturbed {
			mark = "*"
			disturbed++
		}
		kern := rec.Kernels
		if rec.Rounds > 1 && rec.TorchTF > 0 {
			kern = fmt.Sprintf("(%.2f-%.2f)  %s", rec.XTorchMin, rec.XTorchMax, kern)
		}
		fmt.Fprintf(w, "%-12s %7d %11.3f %10.1f %6.0f%% %8.1f%s %8.3f %9s %7s  %s\n", rec.Method, rec.Tokens, rec.MsPerLayer,
			rec.WeightGBps, 100*rec.WeightGBps/med, rec.ReadNearGBps, mark, rec.TFLOPS, tt, x, kern)
	}
	if disturbed > 0 {
		fmt.Fprintf(w, "* %d row(s) ran while the probe sample next to them read under %.0f%% of the median: something else used the memory then; rerun those rows\n",
			disturbed, 100*disturbedFraction)
	}
	for ti, t := range tokens {
		if len(torch[ti]) > 0 {
			r := medianBy(torch[ti], func(r torchResult) float64 { return r.TFLOPS })
			fmt.Fprintf(w, "torch TF at %d tokens: the fastest of %s (%s at %d threads)", t, r.allText(), r.Variant, r.Threads)
			if len(torch[ti]) > 1 {
				fmt.Fprintf(w, "; median of %d rounds:", len(torch[ti]))
				for _, x := range torch[ti] {
					fmt.Fprintf(w, " %.3f", x.TFLOPS)
				}
			}
			fmt.Fprintln(w)
		}
	}
	for _, rec := range records {
		if rec.XBF16 > 0 {
			fmt.Fprintf(w, "%s ÷ AMXBF16 at %d tokens, same-round times: median %.2f of %d rounds (%.2f-%.2f)\n",
				rec.Method, rec.Tokens, rec.XBF16, rec.Rounds, rec.XBF16Min, rec.XBF16Max)
		}
	}
	tiles.print(w, s, records)
	if o.phases {
		fmt.Fprintf(w, "phases, ms per task:\n%-12s %7s", "method", "tokens")
		for _, n := range cpuexperts.PhaseNames {
			fmt.Fprintf(w, " %9s", n)
		}
		fmt.Fprintln(w)
		for _, rec := range records {
			fmt.Fprintf(w, "%-12s %7d", rec.Method, rec.Tokens)
			for _, n := range cpuexperts.PhaseNames {
				fmt.Fprintf(w, " %9.3f", rec.PhaseMs[n])
			}
			fmt.Fprintln(w)
		}
	}
	if o.trace {
		printTrace(w, records)
	}
	for _, rec := range records {
		if rec.PrefetchKB > 0 {
			fmt.Fprintf(w, "prefetch %s %d tokens: %.0f of %.0f KB per task read in the gap (%.0f%%)\n", rec.Method, rec.Tokens,
				rec.PrefetchReadKB, rec.PrefetchKB, 100*rec.PrefetchReadKB/rec.PrefetchKB)
		}
	}
	return records, nil
}

// moePoint is one round's measurement of a (method, token count): the
// engine's, the probe sample right before it, the baseline's TFLOPS
// measured right before that (0 = none) and the tile probe's sample taken
// before the read probe's (0 = none).
type moePoint struct {
	r     enginebench.BenchResult
	near  float64
	torch float64
	tile  float64
}

// moeRecordOf makes the record of a (method, token count) from its rounds:
// the round of median time, the baseline's median, and the median, lowest
// and highest of the rounds' ratios.
func moeRecordOf(s enginebench.BenchShape, pts []moePoint, layers int) moeRecord {
	p := medianBy(pts, func(q moePoint) float64 { return q.r.Seconds })
	r := p.r
	rec := moeRecord{Model: s.Name, Method: string(r.Method), Kernels: r.Kernels, Tokens: r.Tokens,
		MsPerLayer: r.Seconds * 1e3, WeightGBps: r.GBps(), ReadNearGBps: p.near / 1e9, TFLOPS: r.TFLOPS(),
		Layers: layers, PhaseMs: phaseMs(r.Phases), Rounds: len(pts)}
	if r.Trace.Tasks > 0 {
		rec.Trace = &r.Trace
	}
	rec.PrefetchKB, rec.PrefetchReadKB = float64(r.PrefetchPlanned)/1e3, float64(r.PrefetchRead)/1e3
	var ratios, torch []float64
	for _, q := range pts {
		rec.RoundMs = append(rec.RoundMs, q.r.Seconds*1e3)
		if q.torch > 0 {
			ratios = append(ratios, q.r.TFLOPS()/q.torch)
			torch = append(torch, q.torch)
		}
	}
	if len(ratios) > 0 {
		rec.TorchTF, _, _ = spread(torch)
		rec.XTorch, rec.XTorchMin, rec.XTorchMax = spread(ratios)
	}
	var tiles, xtile, tileTorch []float64
	for _, q := range pts {
		if q.tile > 0 {
			tiles = append(tiles, q.tile)
			xtile = append(xtile, q.r.TFLOPS()/q.tile)
			if q.torch > 0 {
				tileTorch = append(tileTorch, q.tile/q.torch)
			}
		}
	}
	if len(tiles) > 0 {
		rec.TileTF, _, _ = spread(tiles)
		rec.XTile, rec.XTileMin, rec.XTileMax = spread(xtile)
	}
	if len(tileTorch) > 0 {
		rec.TileXTorch, _, _ = spread(tileTorch)
	}
	return rec
}

// setXBF16 sets XBF16 on the records of every method but AMXBF16 that has
// an AMXBF16 record of the same token count and round count: the rounds'
// own ratios of AMXBF16's time to the method's, as xtorch is taken, so that
// the machine's drift between rounds moves both sides of each ratio.
func setXBF16(records []moeRecord) {
	for i := range records {
		rec := &records[i]
		if rec.Method == string(cpuexperts.AMXBF16) {
			continue
		}
		for _, b := range records {
			if b.Method != string(cpuexperts.AMXBF16) || b.Tokens != rec.Tokens || len(b.RoundMs) != len(rec.RoundMs) || len(b.RoundMs) == 0 {
				continue
			}
			var ratios []float64
			for r, ms := range rec.RoundMs {
				ratios = append(ratios, b.RoundMs[r]/ms)
			}
			rec.XBF16, rec.XBF16Min, rec.XBF16Max = spread(ratios)
			break
		}
	}
}

// spread returns the median (medianBy), lowest and highest of v (not empty).
func spread(v []float64) (med, lo, hi float64) {
	return medianBy(v, func(x float64) float64 { return x }), slices.Min(v), slices.Max(v)
}

// medianBy returns the element of v whose key is the median (the lower
// middle of an even count); v is not reordered.
func medianBy[T any](v []T, key func(T) float64) T {
	s := slices.Clone(v)
	slices.SortStableFunc(s, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return s[(len(s)-1)/2]
}

// printTrace prints where a decode task's time goes, in microseconds per
// task (means): the hand-off before the workers start, the workers' start
// and finish spread, the completion, and the caller's own time.
func printTrace(w io.Writer, records []moeRecord) {
	fmt.Fprintln(w, cpuexperts.TraceHeader)
	for _, r := range records {
		if r.Trace != nil {
			fmt.Fprintln(w, r.Trace.Row(r.Method, r.Tokens))
		}
	}
}

// phaseMs turns summed phase times into milliseconds per task.
func phaseMs(p cpuexperts.PhaseTimes) map[string]float64 {
	n := p.Phased + p.Fused
	if n == 0 {
		return nil
	}
	m := make(map[string]float64, len(p.Seconds))
	for i, s := range p.Seconds {
		m[cpuexperts.PhaseNames[i]] = s * 1e3 / float64(n)
	}
	return m
}

// torchResult is the PyTorch baseline at one token count: the fastest of its
// forms and thread counts, and what each of them measured.
type torchResult struct {
	TFLOPS  float64            `json:"tflops"`
	Variant string             `json:"variant"` // index or fused (torch_moe.py)
	Threads int                `json:"threads"`
	All     map[string]float64 `json:"all"` // "variant@threads" -> TFLOPS
}

// allText lists every form's TFLOPS in a stable order.
func (r torchResult) allText() string {
	keys := slices.Sorted(maps.Keys(r.All))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.3f", k, r.All[k])
	}
	return strings.Join(parts, ", ")
}

// torchServer is a running torch_moe.py --serve: it builds the baseline's
// weights once and measures one token count per request, so the rounds of
// kt bench --rounds put a PyTorch measurement right before the engine's.
type torchServer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr bytes.Buffer
	dir    string
}

// startTorch starts the embedded PyTorch baseline (the fastest of its forms
// at the engine's thread count and at PyTorch's default) for shape s.
func startTorch(python string, s enginebench.BenchShape, threads int) (*torchServer, error) {
	dir, err := os.MkdirTemp("", "kt-bench-")
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "torch_moe.py")
	if err := os.WriteFile(script, enginebench.TorchMoEScript, 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ts := &torchServer{dir: dir}
	ts.cmd = exec.Command(python, script, "--serve", "--hidden", strconv.Itoa(s.Hidden), "--inter", strconv.Itoa(s.Intermediate),
		"--experts", strconv.Itoa(s.Experts), "--topk", strconv.Itoa(s.TopK), "--threads", strconv.Itoa(threads))
	ts.cmd.Stderr = &ts.stderr
	if ts.in, err = ts.cmd.StdinPipe(); err == nil {
		var out io.ReadCloser
		if out, err = ts.cmd.StdoutPipe(); err == nil {
			ts.out = bufio.NewScanner(out)
			err = ts.cmd.Start()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%s: %w", python, err)
	}
	return ts, nil
}

// measure asks for one token count and returns the baseline's answer;
// lines that are not its JSON (warnings) are skipped.
func (ts *torchServer) measure(tokens int) (torchResult, error) {
	if _, err := fmt.Fprintf(ts.in, "%d\n", tokens); err != nil {
		return torchResult{}, ts.failed(err)
	}
	for ts.out.Scan() {
		var r struct {
			Tokens int `json:"tokens"`
			torchResult
		}
		if json.Unmarshal(ts.out.Bytes(), &r) == nil && r.Tokens == tokens {
			return r.torchResult, nil
		}
	}
	return torchResult{}, ts.failed(ts.out.Err())
}

// failed turns a broken pipe or an early end into an error that carries the
// interpreter's own message (its stderr, once it has exited).
func (ts *torchServer) failed(err error) error {
	ts.in.Close()
	werr := ts.cmd.Wait()
	if err == nil {
		err = werr
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %s", err, strings.TrimSpace(ts.stderr.String()))
}

// close ends the baseline process and removes its script.
func (ts *torchServer) close() {
	ts.in.Close()
	if ts.cmd.ProcessState == nil {
		ts.cmd.Wait()
	}
	os.RemoveAll(ts.dir)
}
