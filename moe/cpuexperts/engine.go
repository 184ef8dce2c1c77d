//go:build linux && amd64 && cgo

package cpuexperts

/*
#cgo CFLAGS: -O3 -std=gnu11 -Wall -Wno-unused-function -Wno-vla
#cgo LDFLAGS: -lpthread -lm
#include <stdlib.h>
#include "kt_moe.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ktserve/kt/sysinfo"
)

// Config sizes and places an Engine. Zero values pick defaults.
type Config struct {
	// Threads is the total worker count (--kt-cpuinfer); 0 = physical cores.
	Threads int
	// Pools is the number of thread pools (--kt-threadpool-count), one per NUMA node; 0 = 1.
	Pools int
	// NUMANodes are the nodes of the pools (--kt-numa-nodes); default 0..Pools-1.
	NUMANodes []int
	// ISA forces a kernel level (auto, amx, avx512, avx2).
	ISA ISA

	// Shapes used to size the preallocated buffers.
	MaxTokens    int // tokens per task (chunked prefill size)
	TopK         int // ids per token
	Experts      int // routed experts per layer
	Hidden       int // hidden size
	Intermediate int // moe_intermediate_size

	// The settings from here to OutputCached tune the kernels and their
	// stores on a CPU other than the one their defaults were measured on;
	// results do not depend on them unless said. Production leaves them
	// zero (the defaults); kt bench --type moe sets each from a flag named
	// after it (--amx-kblock, --prefill-chunk, ...) to measure another value
	// against the default.

	// AMXKBlock is the K block of the AMX prefill kernels in 1 KiB tile
	// steps (32 bf16 or 64 int8 columns): 0 = defaultAMXKBlock, < 0 = no
	// blocking (the whole K in one pass). Results do not depend on it.
	AMXKBlock int
	// AMXSlabBytes: where one gate/up AMX prefill kernel call's activation
	// rows exceed this many bytes, K runs in slabs of at most half of it,
	// each over a group of row blocks, so that a slab's activations stay in
	// L2 (results bitwise unchanged). 0 = the default (1 MiB: DeepSeek-V3's
	// K of 7168 runs in slabs, the Qwen shapes whole), < 0 = never.
	AMXSlabBytes int64
	// AMXSlabGroup caps the 32-row blocks of one slab group (0 = as many
	// as the worker's 512 KiB park holds the gate and up sums of).
	AMXSlabGroup int
	// AMXInt4Block: the AMXINT4 prefill kernel unpacks and runs this many
	// int8 tile steps (64 columns each; rounded down to even) at a time
	// instead of unpacking its whole panel pair first (0 = the whole K).
	// Results do not depend on it.
	AMXInt4Block int
	// AMXInt4Prefetch is how many bytes ahead the int4 AMX prefill's
	// unpack (AMXINT4, INT4_KGROUP) prefetches the int4 panels it reads:
	// 0 = the default, defaultAMXInt4Prefetch where the unpack is fused
	// (AMXInt4Fused) and for INT4_KGROUP's whole-panel unpack (which also
	// requantizes), none for AMXINT4's (measured no faster with it); < 0 =
	// none. Results do not depend on it.
	AMXInt4Prefetch int
	// AMXInt4Fused is the most tokens of an int4 AMX prefill call (AMXINT4,
	// INT4_KGROUP) that unpack their weights block by block inside the tile
	// loop, overlapping the unpack's reads with the tile products (each
	// 32-token block unpacking again); longer calls unpack their whole
	// panels first. 0 = defaultAMXInt4Fused, < 0 = never. Results do not
	// depend on it.
	AMXInt4Fused int
	// AMXInt4FusedFirst: longer int4 AMX prefill calls fuse the unpack with
	// their first 32 tokens' tile products, unpacking into the whole panels
	// the int8 core then runs the other tokens over: 0 = for AMXINT4 only
	// (the default: faster in 8 of 8 pairs at 1024-2048 tokens on the AMX
	// machine; INT4_KGROUP mixed, 4 of 8), > 0 =
	// for both int4 methods, < 0 = neither (the whole panels unpacked
	// first). Results do not depend on it.
	AMXInt4FusedFirst int
	// AMXMinTokens is the fewest tokens of one expert that run the AMX
	// prefill kernels where the CPU has AMX (fewer run the vector decode
	// kernels): 0 = 8, 4 for AMXINT4 (kt_engine.h AMX_MIN_M_I4). Integer
	// methods give the same results either way but for INT4_KGROUP, whose
	// AMX path requantizes.
	AMXMinTokens int
	// AMXKBlockDown is the K block of the down projection's AMX prefill
	// calls (K = the pool's intermediate slice, shorter than gate/up's
	// hidden size): 0 = AMXKBlock, < 0 = no blocking. Results do not depend
	// on it.
	AMXKBlockDown int
	// AMXPrefetch is how many tile steps ahead the AMX prefill kernels
	// prefetch their A and B tiles into L1: 0 = defaultAMXPrefetch, < 0 = none.
	AMXPrefetch int
	// AMXPrefetchTiles picks the tiles AMXPrefetch prefetches: 1 = A
	// (activations), 2 = B (weights), 3 = both, 0 = defaultAMXPrefetchTiles.
	AMXPrefetchTiles int
	// AMXTileT1 picks the AMX prefill tiles loaded with the T1 hint
	// (tileloaddt1: the core need not keep their lines close, as for data
	// streamed once): 1 = A (activations), 2 = B (weights), 3 = both, for
	// every AMX kernel; -1 = none (plain tileloadd); 0 = the default, the
	// bf16 kernels' B tiles (CORE_T1 in kern_amx_core.h says what the device
	// measured). Results do not depend on it.
	AMXTileT1 int
	// AMXNextLines is how many cache lines of the next kernel call's weights
	// (the up projection after the gate, the next 32 rows) an AMX prefill
	// kernel call prefetches into L2 per tile step: 0 = by activation format
	// (4 for bf16, none for int8: measured on the AMX machine), < 0 =
	// none. Results do not depend on it.
	AMXNextLines int
	// DecodePrefetch is how many bytes ahead the decode kernels over packed
	// panels (int8, int4, group-wise int4, bf16) prefetch their weights, on a
	// panel's first pass over the tokens: 0 = defaultDecodePrefetch, < 0 = none.
	DecodePrefetch int
	// PrefillChunk is the most tokens of one expert a prefill kernel call
	// takes (rounded up to 32, at most 512; 0 = by activation format: 128
	// for bf16, 512 for int8, as measured best on the AMX machine; kt_engine.h
	// prefill_chunk). Results do not depend on it.
	PrefillChunk int

	// SlotOutputsF32 keeps every (token, expert) pair's down output in f32
	// until the weighted sum. By default they are stored in bf16 where the
	// activations are bf16 or int8 (not with an expert LoRA), as
	// KTransformers' AMX MoE stores them: the down phase writes and the merge
	// reads half the bytes (268 MB -> 134 MB for 4096 tokens of Qwen3-30B),
	// for one more bf16 rounding of each expert's output.
	SlotOutputsF32 bool
	// IntermediateF32 keeps the int8 methods' h = silu(gate·x)·(up·x) in f32
	// until it is quantized for the down projection. By default it is
	// rounded to bf16 first (not with an expert LoRA), as KTransformers' AMX
	// MoE stores gate and up outputs: half the bytes written and read back
	// (100 MB -> 50 MB each way at 4096 tokens of Qwen3-30B), for a rounding
	// far below the int8 step that follows.
	IntermediateF32 bool
	// SlotOutputsCached stores the per-slot down outputs of large (phased)
	// tasks through the caches; by default they go around them (only the
	// merge reads them, after a barrier). Results do not depend on it.
	SlotOutputsCached bool
	// OutputCached stores a large (phased) task's output rows through the
	// caches; by default, where the rows are 64-byte aligned and the task is
	// not incremental, they go around them (a task's output is megabytes,
	// read next by the caller or a copy to the GPU). Results do not depend on it.
	OutputCached bool
	// OwnedDecode makes each worker of a one-token decode task take first
	// the gate/up row blocks it owns, blocks assigned by expert id, and a
	// prefetch task read those blocks on their owners, so that a task after
	// a right prediction finds them in its cores' own L2 (a line in another
	// core's L2 costs about a memory access on the device's Xeon). Tasks of
	// more tokens keep the counter order.
	OwnedDecode bool
	// DecodeMissStream makes each worker of an owned one-token decode task
	// (OwnedDecode) run its blocks of the experts the layer's last prefetch
	// read first, while its kernels (the AVX-512 int8 and int4 one-token
	// ones) prefetch its blocks of the other experts, the prediction's
	// misses, into its L2 as a side stream, a line per 128 bytes of their
	// own: the misses' reads overlap the cached blocks' arithmetic instead
	// of following it. Results do not depend on it.
	DecodeMissStream bool
	// Trace times every decode (fused) task per thread; Engine.Trace reads
	// the sums. It costs a few clock reads per thread and task.
	Trace bool
	// SpinWait is how long the engine's threads, and a caller in Sync or
	// Forward, spin on a change before they sleep on a futex: pausing for
	// the first 30 us, then yielding to other threads of their core now and
	// then. 0 = DefaultSpinWait, < 0 = sleep at once.
	SpinWait time.Duration

	// testRouteDelay makes the queue thread route an early-started task
	// this long after its workers start (tests of the wait for routing).
	testRouteDelay time.Duration

	// fusedMaxSlots overrides the barrier-free decode path's limit on
	// (token, expert) pairs per task: 0 = default, < 0 = never (tests).
	fusedMaxSlots int

	// amxEmu runs the engine as on an AMX CPU, its AMX tile kernels over
	// emulated tiles (kern_amx_emu.c, scalar and slow; KT_ISA_AMX_EMU):
	// the AMX prefill path (tile-order activations, bf16 h stored in tile
	// order, the int4 unpack, non-temporal outputs, the prefill chunk and
	// K-block knobs) on CPUs without AMX (tests only). Decode, routing,
	// gather and merge use the kernels an AMX CPU would, which this CPU must
	// have: AVX-512 with VNNI and BF16. ISA must be auto.
	amxEmu bool
}

// Engine is a set of worker pools with a task queue and preallocated scratch.
// Layers created on it share the scratch; tasks run one at a time in FIFO
// order. Submit/Sync from Go are not safe for concurrent use by several
// goroutines.
type Engine struct {
	c       *C.kt_engine
	cfg     Config
	feat    Features
	bits    int
	inter   []int // intermediate rows per pool
	cpus    []int
	bind    []int
	mu      sync.Mutex
	pinned  runtime.Pinner
	npinned int
	lora    *loraScratch // expert LoRA scratch (lora.go), nil until a layer has LoRA
}

// DetectFeatures reports the CPU features the kernels can use, requesting
// AMX tile state from the OS when the CPU has AMX.
func DetectFeatures() Features {
	return cpuFeatures(func() bool { return sysinfo.RequestAMX() == nil })
}

// NewEngine validates cfg, starts the pools and allocates the scratch.
func NewEngine(cfg Config) (*Engine, error) {
	feat := DetectFeatures()
	bits, err := cfg.validate(feat)
	if err != nil {
		return nil, err
	}
	threads := cfg.poolThreads()
	cpus, bind := readTopology("/sys", allowedCPUs()).plan(threads, cfg.NUMANodes)
	cc, err := cfg.cConfig(threads, bind, bits)
	if err != nil {
		return nil, err
	}
	ccpus := (*C.int)(C.malloc(C.size_t(len(cpus)+1) * C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(ccpus))
	cs := unsafe.Slice(ccpus, len(cpus)+1)
	for i, c := range cpus {
		cs[i] = C.int(c)
	}
	cc.cpus = ccpus
	cc.ncpus = C.int(len(cpus))
	var msg [256]C.char
	ce := C.kt_engine_new(&cc, &msg[0], C.int(len(msg)))
	if ce == nil {
		return nil, fmt.Errorf("cpu expert engine: %s", C.GoString(&msg[0]))
	}
	e := &Engine{c: ce, cfg: cfg, feat: feat, bits: int(C.kt_engine_isa(ce)), cpus: cpus, bind: bind}
	for p := 0; p < cfg.Pools; p++ {
		e.inter = append(e.inter, cfg.Intermediate/cfg.Pools)
	}
	return e, nil
}

// validate checks the configuration against the machine's features and
// the engine's limits, fills in the pool defaults (one pool, pools on
// NUMA nodes 0, 1, ...; all threads) and returns the kernel level bits.
func (cfg *Config) validate(feat Features) (int, error) {
	var bits int
	var err error
	if cfg.amxEmu {
		bits, err = feat.emuBits(cfg.ISA)
	} else {
		bits, err = feat.bits(cfg.ISA)
	}
	if err != nil {
		return 0, err
	}
	if cfg.ISA == ISAAuto || cfg.ISA == "" {
		cfg.ISA = ISAAuto
	}
	if cfg.Pools == 0 {
		cfg.Pools = 1
	}
	if cfg.Pools < 1 || cfg.Pools > 8 {
		return 0, fmt.Errorf("threadpool count %d outside 1..8", cfg.Pools)
	}
	if cfg.NUMANodes == nil {
		for p := 0; p < cfg.Pools; p++ {
			cfg.NUMANodes = append(cfg.NUMANodes, p)
		}
	}
	if len(cfg.NUMANodes) != cfg.Pools {
		return 0, fmt.Errorf("%d NUMA nodes given for %d thread pools: --kt-numa-nodes needs one node per pool", len(cfg.NUMANodes), cfg.Pools)
	}
	if cfg.MaxTokens < 1 || cfg.TopK < 1 || cfg.Experts < 1 || cfg.Hidden < 1 || cfg.Intermediate < 1 {
		return 0, fmt.Errorf("engine shapes must be positive: max tokens %d, top-k %d, experts %d, hidden %d, intermediate %d",
			cfg.MaxTokens, cfg.TopK, cfg.Experts, cfg.Hidden, cfg.Intermediate)
	}
	if err := CheckShape("", cfg.Hidden, cfg.Intermediate, cfg.Pools); err != nil {
		return 0, err
	}
	if int64(cfg.MaxTokens)*int64(cfg.TopK) > 1<<26 || cfg.Experts > 1<<16 || cfg.Hidden > 1<<16 || cfg.Intermediate > 1<<16 {
		return 0, fmt.Errorf("engine shapes too large: %d tokens x top-%d, %d experts, hidden %d, intermediate %d",
			cfg.MaxTokens, cfg.TopK, cfg.Experts, cfg.Hidden, cfg.Intermediate)
	}
	if cfg.Threads == 0 {
		cfg.Threads = defaultThreads()
	}
	if cfg.Threads < cfg.Pools {
		return 0, fmt.Errorf("%d threads for %d pools: each pool needs at least one thread", cfg.Threads, cfg.Pools)
	}
	if cfg.Threads > 1024 {
		return 0, fmt.Errorf("%d threads: at most 1024", cfg.Threads)
	}
	if cfg.AMXPrefetchTiles < 0 || cfg.AMXPrefetchTiles > 3 {
		return 0, fmt.Errorf("cpu expert engine: AMXPrefetchTiles %d: want 0-3 (1 = A, 2 = B, 3 = both)", cfg.AMXPrefetchTiles)
	}
	if cfg.AMXTileT1 < -1 || cfg.AMXTileT1 > 3 {
		return 0, fmt.Errorf("cpu expert engine: AMXTileT1 %d: want -1 (none), 0 (default), 1 (A), 2 (B) or 3 (both)", cfg.AMXTileT1)
	}
	return bits, nil
}

// poolThreads splits the threads over the pools, the first pools taking
// one more where they do not divide.
func (cfg *Config) poolThreads() []int {
	threads := make([]int, cfg.Pools)
	for p := range threads {
		threads[p] = cfg.Threads / cfg.Pools
		if p < cfg.Threads%cfg.Pools {
			threads[p]++
		}
	}
	return threads
}

// cConfig is the C engine's configuration: the pools' threads and NUMA
// nodes, the kernel level bits and the tuning fields, their defaults
// filled in (the CPU list is set by the caller, which owns its memory).
func (cfg *Config) cConfig(threads, bind []int, bits int) (C.kt_engine_config, error) {
	var cc C.kt_engine_config
	cc.npools = C.int(cfg.Pools)
	for p := 0; p < cfg.Pools; p++ {
		cc.threads[p] = C.int(threads[p])
		cc.node[p] = C.int(bind[p])
	}
	cc.isa = C.int(bits)
	cc.max_tokens = C.int(cfg.MaxTokens)
	cc.max_k = C.int(cfg.TopK)
	cc.fused_max_slots = C.int(cfg.fusedMaxSlots)
	if cfg.AMXKBlock == 0 {
		cfg.AMXKBlock = defaultAMXKBlock
	}
	if cfg.AMXKBlock > 0 {
		cc.amx_kch = C.int(cfg.AMXKBlock)
	}
	cc.amx_kch_down = cc.amx_kch
	if cfg.AMXKBlockDown != 0 {
		cc.amx_kch_down = C.int(max(cfg.AMXKBlockDown, 0))
	}
	if cfg.AMXPrefetch == 0 {
		cfg.AMXPrefetch = defaultAMXPrefetch
	}
	if cfg.AMXPrefetch > 0 {
		cc.amx_pf = C.int(cfg.AMXPrefetch)
	}
	cc.amx_t1 = C.int(cfg.AMXTileT1)
	if cfg.AMXPrefetchTiles == 0 {
		cfg.AMXPrefetchTiles = defaultAMXPrefetchTiles
	}
	cc.amx_pfm = C.int(cfg.AMXPrefetchTiles)
	cc.amx_nxl = C.int(max(min(cfg.AMXNextLines, 64), -1)) // 0: by activation format (kt_engine.h AMX_NXL_*)
	if cfg.DecodePrefetch == 0 {
		cfg.DecodePrefetch = defaultDecodePrefetch
	}
	if cfg.DecodePrefetch > 0 {
		cc.dec_pf = C.int(min(cfg.DecodePrefetch, 1<<20))
	}
	if cfg.PrefillChunk > 0 {
		cc.mch = C.int(cfg.PrefillChunk)
	}
	cc.amx_slab = C.int64_t(cfg.AMXSlabBytes)
	cc.amx_slab_grp = knob(cfg.AMXSlabGroup)
	cc.amx_min_m = knob(cfg.AMXMinTokens)
	cc.amx_i4_kch = knob(cfg.AMXInt4Block)
	i4pf, i4gpf, i4fpf := cfg.AMXInt4Prefetch, cfg.AMXInt4Prefetch, cfg.AMXInt4Prefetch
	if i4pf == 0 { // the default: fused calls and INT4_KGROUP's unpack
		i4gpf, i4fpf = defaultAMXInt4Prefetch, defaultAMXInt4Prefetch
	}
	cc.amx_i4_pf = knob(i4pf)
	cc.amx_i4g_pf = knob(i4gpf)
	cc.amx_i4f_pf = knob(i4fpf)
	if cfg.AMXInt4Fused == 0 {
		cfg.AMXInt4Fused = defaultAMXInt4Fused
	}
	cc.amx_i4_fuse = knob(cfg.AMXInt4Fused)
	switch {
	case cfg.AMXInt4FusedFirst == 0:
		cc.amx_i4_fuse1 = 1 // AMXINT4
	case cfg.AMXInt4FusedFirst > 0:
		cc.amx_i4_fuse1 = 3 // AMXINT4 and INT4_KGROUP
	}
	cc.y_f32 = b2i(cfg.SlotOutputsF32)
	cc.y_cached = b2i(cfg.SlotOutputsCached)
	cc.h_f32 = b2i(cfg.IntermediateF32)
	cc.out_cached = b2i(cfg.OutputCached)
	cc.owned = b2i(cfg.OwnedDecode)
	cc.miss_pf = b2i(cfg.DecodeMissStream)
	cc.trace = b2i(cfg.Trace)
	cc.test_route_delay_us = C.int(min(cfg.testRouteDelay.Microseconds(), 1e6))
	if cfg.SpinWait == 0 {
		cfg.SpinWait = DefaultSpinWait
	}
	cc.spin_ns = C.int64_t(max(min(cfg.SpinWait, time.Second), -1))
	cc.nexp = C.int(cfg.Experts)
	cc.hidden = C.int(cfg.Hidden)
	cc.inter_p = C.int(cfg.Intermediate / cfg.Pools)
	return cc, nil
}

// defaultAMXKBlock is the default Config.AMXKBlock: no blocking. On the
// device (SPR, 2 runs) K blocks of 4-16 tile steps were within the noise of
// one pass for AMXINT8 and up to 15% slower for AMXBF16.
const defaultAMXKBlock = -1

// defaultAMXPrefetchTiles is the default Config.AMXPrefetchTiles: the B
// (weight) tiles only. In BenchmarkAMXKernel prefetching B alone was never
// slower than both and up to 10% faster; fewer prefetch instructions leave
// the load ports to the tile loads.
const defaultAMXPrefetchTiles = 2

// defaultAMXPrefetch is the default Config.AMXPrefetch.
const defaultAMXPrefetch = 1

// DefaultSpinWait is the default Config.SpinWait: longer than the gap
// between two layers' tasks in a hybrid decode step (~0.2-0.4 ms), so that
// the workers are awake when the next one comes. The hybrid step asks for
// more (HybridSpinWait); where the rest of the model runs on the CPU, a
// spinning worker would take time from the backend's own threads.
const DefaultSpinWait = 500 * time.Microsecond

// HybridSpinWait is the Config.SpinWait of the hybrid step (the rest of the
// model on a GPU, nothing else on the workers' cores): longer than the gap
// between two decode steps with a sampled token (the lm head, the read-back
// and the sampler: ~0.55 ms). At 0.5 ms a sampled step's first MoE layer
// took 188-242 µs against ~140 for the others (every thread woken from a
// futex); at 1.5 ms 136 µs, and sampled decode 5-15 % faster.
const HybridSpinWait = 1500 * time.Microsecond

// defaultDecodePrefetch is the default Config.DecodePrefetch.
const defaultDecodePrefetch = 2048

// defaultAMXInt4Fused is the default Config.AMXInt4Fused: calls of one
// token block (on the AMX machine, at 256 and 512 tokens faster than the
// whole-panel unpack in 16 of 16 pairs).
const defaultAMXInt4Fused = 32

// defaultAMXInt4Prefetch is Config.AMXInt4Prefetch's default for the fused
// unpack (BenchmarkIntFewRows on the AMX machine, streamed weights, 16
// threads: faster than none in 6 of 6 int4 and int4g cases) and for
// INT4_KGROUP's whole-panel unpack (faster at 256-1024 tokens in 12 of 12
// pairs against none; AMXINT4's slower in 9 of 12).
const defaultAMXInt4Prefetch = 2048

// Phase names the timed phases of a task (Engine.Phases).
var PhaseNames = [...]string{"route", "convert", "gather", "gate/up", "quantize", "down", "merge", "fused"}

// PhaseTimes are the times spent per phase since the last call, summed over
// tasks: Phased tasks ran the barrier phases, Fused ones the decode path.
type PhaseTimes struct {
	Seconds       [len(PhaseNames)]float64
	Phased, Fused int
}

// Phases returns the per-phase times accumulated since the last call and
// resets them. Call it only when no task is in flight (after Sync).
func (e *Engine) Phases() PhaseTimes {
	var ns [C.KT_NPHASES]C.int64_t
	var tasks [2]C.int64_t
	C.kt_engine_phases(e.c, &ns[0], &tasks[0])
	var p PhaseTimes
	for i := range p.Seconds {
		p.Seconds[i] = float64(ns[i]) / 1e9
	}
	p.Phased, p.Fused = int(tasks[0]), int(tasks[1])
	return p
}

// Prefetched returns the bytes the prefetch tasks so far (Layer.Prefetch)
// were to read and the bytes they read before a task queued behind them
// stopped them. Call it only when no task is in flight (after Sync).
func (e *Engine) Prefetched() (planned, read int64) {
	var p, r C.int64_t
	C.kt_engine_prefetched(e.c, &p, &r)
	return int64(p), int64(r)
}

// TaskTrace is the mean timing of the decode (fused) tasks traced since the
// last call (Config.Trace), in seconds. "Published" is when a task's job was
// handed to the workers, after routing; worker times are from then.
type TaskTrace struct {
	Tasks       int
	SubmitPick  float64 // kt_submit -> the queue thread took the task
	PickPublish float64 // routing and setup
	SeenMean    float64 // published -> a worker starts (mean over workers)
	SeenMax     float64 // ... the last worker to start
	GateUpEnd   float64 // published -> the last gate/up item done
	// GateUpWork and DownWork are a worker's time inside its gate/up and
	// down blocks (the kernels and their stores; mean over the workers): the
	// rest of its time to EndMean is starting, claiming items and waiting.
	GateUpWork, DownWork float64
	EndMin               float64 // published -> the first worker out of items
	EndMean              float64 // ... mean over workers
	EndMax               float64 // ... the last worker done
	AllDone              float64 // published -> the runner saw every worker done
	DoneCompl            float64 // all done -> completion published
	ComplReturn          float64 // completion -> Sync returned (per waiting sync)
	ReturnSub            float64 // Sync returned -> next submit: the caller's own time (per gap)
	ItemsMin             float64 // fewest items one worker ran in a task
	ItemsMax             float64 // most items one worker ran in a task
	// Sleeps and SyncSleeps count the waits per task that ended in a futex
	// sleep: of the engine's threads, and of callers in Sync.
	Sleeps, SyncSleeps float64
	// WorkerSeen and WorkerEnd are each worker thread's mean published ->
	// start and published -> done times.
	WorkerSeen, WorkerEnd []float64
}

// Trace returns the decode-task timing accumulated since the last call and
// resets it (zero unless Config.Trace). Call it only when no task is in
// flight (after Sync).
func (e *Engine) Trace() TaskTrace {
	var s [C.KT_TR_N]C.int64_t
	n := int(C.kt_engine_threads(e.c))
	wend, wseen := make([]C.int64_t, n+1), make([]C.int64_t, n+1)
	C.kt_engine_trace(e.c, &s[0], &wend[0], &wseen[0])
	var t TaskTrace
	t.Tasks = int(s[C.KT_TR_TASKS])
	if t.Tasks == 0 {
		return t
	}
	per := func(i int, n int64) float64 {
		if n == 0 {
			return 0
		}
		return float64(s[i]) / 1e9 / float64(n)
	}
	tasks := int64(t.Tasks)
	t.SubmitPick, t.PickPublish = per(C.KT_TR_SUB_PICK, tasks), per(C.KT_TR_PICK_PUB, tasks)
	t.SeenMean, t.SeenMax = per(C.KT_TR_SEEN_AVG, tasks), per(C.KT_TR_SEEN_MAX, tasks)
	t.GateUpEnd = per(C.KT_TR_GU_MAX, tasks)
	t.GateUpWork, t.DownWork = per(C.KT_TR_GU_WORK, tasks), per(C.KT_TR_DN_WORK, tasks)
	t.EndMin, t.EndMean, t.EndMax = per(C.KT_TR_END_MIN, tasks), per(C.KT_TR_END_AVG, tasks), per(C.KT_TR_END_MAX, tasks)
	t.AllDone, t.DoneCompl = per(C.KT_TR_ALLDONE, tasks), per(C.KT_TR_DONE_COMPL, tasks)
	t.ComplReturn = per(C.KT_TR_COMPL_RET, int64(s[C.KT_TR_SYNCS]))
	t.ReturnSub = per(C.KT_TR_RET_SUB, int64(s[C.KT_TR_GAPS]))
	t.ItemsMin = float64(s[C.KT_TR_ITEMS_MIN]) / float64(tasks)
	t.ItemsMax = float64(s[C.KT_TR_ITEMS_MAX]) / float64(tasks)
	t.Sleeps = float64(s[C.KT_TR_SLEEPS]) / float64(tasks)
	t.SyncSleeps = float64(s[C.KT_TR_SYNC_SLEEPS]) / float64(tasks)
	for i := 0; i < n; i++ {
		t.WorkerEnd = append(t.WorkerEnd, float64(wend[i])/1e9/float64(tasks))
		t.WorkerSeen = append(t.WorkerSeen, float64(wseen[i])/1e9/float64(tasks))
	}
	return t
}

// PhysicalCores counts the cores this process may run on (one per core,
// hyperthreads not counted).
func PhysicalCores() int {
	return max(readTopology("/sys", allowedCPUs()).physicalCores(), 1)
}

// allowedCPUs lists the CPUs this process may run on (its affinity mask),
// or 0..NumCPU-1 when the mask cannot be read.
func allowedCPUs() []int {
	var set unix.CPUSet
	var allowed []int
	if err := unix.SchedGetaffinity(0, &set); err == nil {
		for c := 0; c < 1024; c++ {
			if set.IsSet(c) {
				allowed = append(allowed, c)
			}
		}
	}
	if len(allowed) == 0 {
		for c := 0; c < runtime.NumCPU(); c++ {
			allowed = append(allowed, c)
		}
	}
	return allowed
}

// defaultThreads is the default worker count: every physical core but one,
// which is left to the thread that drives the GPU and submits tasks.
func defaultThreads() int {
	c := PhysicalCores()
	if c > 2 {
		return c - 1
	}
	return c
}

// Close stops the threads and frees the scratch. Layers must not be used
// afterwards; pending tasks are finished first.
func (e *Engine) Close() {
	if e == nil || e.c == nil {
		return
	}
	C.kt_sync(e.c, 0)
	C.kt_engine_free(e.c)
	e.c = nil
	e.lora.free()
	e.pinned.Unpin()
}

// Features returns the CPU features detected when the engine was created.
func (e *Engine) Features() Features { return e.feat }

// Kernels describes the kernels method m runs on this engine.
func (e *Engine) Kernels(m Method) string { return describe(m, e.bits) }

// Config returns the configuration after defaults were applied.
func (e *Engine) Config() Config { return e.cfg }

// CPUs returns the CPU each worker thread is pinned to, in pool order.
func (e *Engine) CPUs() []int { return append([]int(nil), e.cpus...) }

// WorkerCPUs is what CPUs() returns for an engine of threads workers in one
// pool (0: defaultThreads), without starting one: the CPUs a probe or
// benchmark pins its threads to so that they run where the workers would.
func WorkerCPUs(threads int) []int {
	if threads == 0 {
		threads = defaultThreads()
	}
	cpus, _ := readTopology("/sys", allowedCPUs()).plan([]int{threads}, []int{0})
	return cpus
}

// Sync waits for every submitted task, releases the Go memory they used and
// returns the first error a task reported.
func (e *Engine) Sync() error {
	if e.c == nil {
		return errors.New("cpu expert engine is closed")
	}
	C.kt_sync(e.c, 0)
	e.mu.Lock()
	e.pinned.Unpin()
	e.npinned = 0
	e.mu.Unlock()
	var msg [256]C.char
	if C.kt_take_error(e.c, &msg[0], C.int(len(msg))) != 0 {
		return fmt.Errorf("cpu expert task: %s", C.GoString(&msg[0]))
	}
	return nil
}

// Wait waits until at most allowPending submitted tasks are unfinished
// (kt_sync's allow_pending: the tasks run in FIFO order, so the earlier
// ones are done) and returns the first error a finished task reported.
// Unlike Sync it keeps the Go memory of the submitted tasks pinned: call
// Sync once every task is done to release it.
func (e *Engine) Wait(allowPending int) error {
	if e.c == nil {
		return errors.New("cpu expert engine is closed")
	}
	C.kt_sync(e.c, C.int(max(allowPending, 0)))
	var msg [256]C.char
	if C.kt_take_error(e.c, &msg[0], C.int(len(msg))) != 0 {
		return fmt.Errorf("cpu expert task: %s", C.GoString(&msg[0]))
	}
	return nil
}

// knob is a non-negative engine knob for C, at most 1<<20 (negative
// values, "none", become 0).
func knob(v int) C.int { return C.int(min(max(v, 0), 1<<20)) }

// b2i is a C flag: 1 for true.
func b2i(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
