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
	"slices"
	"sync"
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
	// NoPin leaves threads unpinned.
	NoPin bool

	// Shapes used to size the preallocated buffers.
	MaxTokens    int // tokens per task (chunked prefill size)
	TopK         int // ids per token
	Experts      int // routed experts per layer
	Hidden       int // hidden size
	Intermediate int // moe_intermediate_size

	// AMXKBlock is the K block of the AMX prefill kernels in 1 KiB tile
	// steps (32 bf16 or 64 int8 columns): 0 = DefaultAMXKBlock, < 0 = no
	// blocking (the whole K in one pass). Results do not depend on it.
	AMXKBlock int
	// AMXPrefetch is how many tile steps ahead the AMX prefill kernels
	// prefetch their A and B tiles into L1: 0 = DefaultAMXPrefetch, < 0 = none.
	AMXPrefetch int
	// DecodePrefetch is how many bytes ahead the one-token int8/int4 decode
	// kernels prefetch their weight panels: 0 = DefaultDecodePrefetch, < 0 = none.
	DecodePrefetch int
	// PrefillChunk is the most tokens of one expert a prefill kernel call
	// takes (rounded up to 32, at most 512; 0 = 512). Results do not depend on it.
	PrefillChunk int

	// fusedMaxSlots overrides the barrier-free decode path's limit on
	// (token, expert) pairs per task: 0 = default, < 0 = never (tests).
	fusedMaxSlots int
}

// Engine is a set of worker pools with a task queue and preallocated scratch.
// Layers created on it share the scratch; tasks run one at a time in FIFO
// order. Submit/Sync from Go are not safe for concurrent use by several
// goroutines; the C entry points (Buffers) may be called from any thread.
type Engine struct {
	c      *C.kt_engine
	cfg    Config
	feat   Features
	bits   int
	inter  []int // intermediate rows per pool
	cpus   []int
	bind   []int
	mu     sync.Mutex
	pinned runtime.Pinner
	lora   *loraScratch // expert LoRA scratch (lora.go), nil until a layer has LoRA
}

// DetectFeatures reports the CPU features the kernels can use, requesting
// AMX tile state from the OS when the CPU has AMX.
func DetectFeatures() Features {
	return cpuFeatures(func() bool { return sysinfo.RequestAMX() == nil })
}

// NewEngine validates cfg, starts the pools and allocates the scratch.
func NewEngine(cfg Config) (*Engine, error) {
	feat := DetectFeatures()
	bits, err := feat.bits(cfg.ISA)
	if err != nil {
		return nil, err
	}
	if cfg.ISA == ISAAuto || cfg.ISA == "" {
		cfg.ISA = ISAAuto
	}
	if cfg.Pools == 0 {
		cfg.Pools = 1
	}
	if cfg.Pools < 1 || cfg.Pools > 8 {
		return nil, fmt.Errorf("threadpool count %d outside 1..8", cfg.Pools)
	}
	if cfg.NUMANodes == nil {
		for p := 0; p < cfg.Pools; p++ {
			cfg.NUMANodes = append(cfg.NUMANodes, p)
		}
	}
	if len(cfg.NUMANodes) != cfg.Pools {
		return nil, fmt.Errorf("%d NUMA nodes given for %d thread pools: --kt-numa-nodes needs one node per pool", len(cfg.NUMANodes), cfg.Pools)
	}
	if cfg.MaxTokens < 1 || cfg.TopK < 1 || cfg.Experts < 1 || cfg.Hidden < 1 || cfg.Intermediate < 1 {
		return nil, fmt.Errorf("engine shapes must be positive: max tokens %d, top-k %d, experts %d, hidden %d, intermediate %d",
			cfg.MaxTokens, cfg.TopK, cfg.Experts, cfg.Hidden, cfg.Intermediate)
	}
	if err := CheckShape("", cfg.Hidden, cfg.Intermediate, cfg.Pools); err != nil {
		return nil, err
	}
	if int64(cfg.MaxTokens)*int64(cfg.TopK) > 1<<26 || cfg.Experts > 1<<16 || cfg.Hidden > 1<<16 || cfg.Intermediate > 1<<16 {
		return nil, fmt.Errorf("engine shapes too large: %d tokens x top-%d, %d experts, hidden %d, intermediate %d",
			cfg.MaxTokens, cfg.TopK, cfg.Experts, cfg.Hidden, cfg.Intermediate)
	}
	topo := readTopology("/sys", allowedCPUs())
	if cfg.Threads == 0 {
		cfg.Threads = DefaultThreads()
	}
	if cfg.Threads < cfg.Pools {
		return nil, fmt.Errorf("%d threads for %d pools: each pool needs at least one thread", cfg.Threads, cfg.Pools)
	}
	if cfg.Threads > 1024 {
		return nil, fmt.Errorf("%d threads: at most 1024", cfg.Threads)
	}
	threads := make([]int, cfg.Pools)
	for p := range threads {
		threads[p] = cfg.Threads / cfg.Pools
		if p < cfg.Threads%cfg.Pools {
			threads[p]++
		}
	}
	cpus, bind := topo.plan(threads, cfg.NUMANodes)

	var cc C.kt_engine_config
	cc.npools = C.int(cfg.Pools)
	for p := 0; p < cfg.Pools; p++ {
		cc.threads[p] = C.int(threads[p])
		cc.node[p] = C.int(bind[p])
	}
	ccpus := (*C.int)(C.malloc(C.size_t(len(cpus)+1) * C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(ccpus))
	cs := unsafe.Slice(ccpus, len(cpus)+1)
	for i, c := range cpus {
		cs[i] = C.int(c)
	}
	if !cfg.NoPin {
		cc.pin = 1
	}
	cc.cpus = ccpus
	cc.ncpus = C.int(len(cpus))
	cc.isa = C.int(bits)
	cc.max_tokens = C.int(cfg.MaxTokens)
	cc.max_k = C.int(cfg.TopK)
	cc.fused_max_slots = C.int(cfg.fusedMaxSlots)
	if cfg.AMXKBlock == 0 {
		cfg.AMXKBlock = DefaultAMXKBlock
	}
	if cfg.AMXKBlock > 0 {
		cc.amx_kch = C.int(cfg.AMXKBlock)
	}
	if cfg.AMXPrefetch == 0 {
		cfg.AMXPrefetch = DefaultAMXPrefetch
	}
	if cfg.AMXPrefetch > 0 {
		cc.amx_pf = C.int(cfg.AMXPrefetch)
	}
	if cfg.DecodePrefetch == 0 {
		cfg.DecodePrefetch = DefaultDecodePrefetch
	}
	if cfg.DecodePrefetch > 0 {
		cc.dec_pf = C.int(min(cfg.DecodePrefetch, 1<<20))
	}
	cc.mch = C.int(max(cfg.PrefillChunk, 0))
	cc.nexp = C.int(cfg.Experts)
	cc.hidden = C.int(cfg.Hidden)
	cc.inter_p = C.int(cfg.Intermediate / cfg.Pools)
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

// DefaultAMXKBlock is the default Config.AMXKBlock: no blocking. On the
// device (SPR, 2 runs) K blocks of 4-16 tile steps were within the noise of
// one pass for AMXINT8 and up to 15% slower for AMXBF16.
const DefaultAMXKBlock = -1

// DefaultAMXPrefetch is the default Config.AMXPrefetch.
const DefaultAMXPrefetch = 1

// DefaultDecodePrefetch is the default Config.DecodePrefetch.
const DefaultDecodePrefetch = 2048

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

// tileLayoutOK reports whether activation rows stored for the AMX kernels
// are read back by their tile addressing (rows of rb bytes; tests).
func tileLayoutOK(rows, rb int) bool { return C.kt_check_tile_layout(C.int(rows), C.int(rb)) == 0 }

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

// DefaultThreads is the default worker count: every physical core but one,
// which is left to the thread that drives the GPU and submits tasks.
func DefaultThreads() int {
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

// Sync waits for every submitted task, releases the Go memory they used and
// returns the first error a task reported.
func (e *Engine) Sync() error {
	if e.c == nil {
		return errors.New("cpu expert engine is closed")
	}
	C.kt_sync(e.c, 0)
	e.mu.Lock()
	e.pinned.Unpin()
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

// StreamRead reads a buffer of the given size with n threads, reps times,
// and returns bytes per second: one sample of the memory read bandwidth.
func StreamRead(bytes int64, threads, reps int) (float64, error) {
	p, err := NewReadProbe(bytes, threads)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	return p.Sample(reps)
}

// ReadProbe measures the memory read bandwidth with a buffer it keeps, so
// that kt bench can take a sample before every measurement (interleaved with
// them) and report the median: on a shared machine the bandwidth moves from
// minute to minute, and a single sample taken once says little.
type ReadProbe struct {
	buf     unsafe.Pointer
	bytes   int64
	threads int
	bits    int
	samples []float64
}

// NewReadProbe allocates and fills a buffer of the given size (far larger
// than the last-level cache) read by the given number of threads.
func NewReadProbe(bytes int64, threads int) (*ReadProbe, error) {
	if bytes < 1<<20 || threads < 1 {
		return nil, fmt.Errorf("read probe: need >= 1 MiB and >= 1 thread")
	}
	feat := DetectFeatures()
	bits, err := feat.bits(ISAAuto)
	if err != nil {
		return nil, err
	}
	buf := C.kt_alloc(C.int64_t(bytes), -1)
	if buf == nil {
		return nil, fmt.Errorf("read probe: cannot allocate %d bytes", bytes)
	}
	b := unsafe.Slice((*byte)(buf), bytes)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return &ReadProbe{buf: buf, bytes: bytes, threads: threads, bits: bits}, nil
}

// Sample reads the buffer reps times and returns bytes per second; the
// sample is kept for Median.
func (p *ReadProbe) Sample(reps int) (float64, error) {
	if p.buf == nil {
		return 0, errors.New("read probe is closed")
	}
	if reps < 1 {
		return 0, fmt.Errorf("read probe: need >= 1 rep")
	}
	secs := float64(C.kt_stream_read(p.buf, C.int64_t(p.bytes), C.int(p.threads), C.int(reps), C.int(p.bits)))
	if secs <= 0 {
		return 0, fmt.Errorf("read probe: threads failed to start")
	}
	chunk := (p.bytes / int64(p.threads)) &^ 255
	bw := float64(chunk*int64(p.threads)*int64(reps)) / secs
	p.samples = append(p.samples, bw)
	return bw, nil
}

// Samples returns the samples taken so far, in order.
func (p *ReadProbe) Samples() []float64 { return append([]float64(nil), p.samples...) }

// Median returns the median of the samples taken so far (0 if none).
func (p *ReadProbe) Median() float64 { return Median(p.samples) }

// Reset forgets the samples taken so far.
func (p *ReadProbe) Reset() { p.samples = p.samples[:0] }

// Close frees the buffer.
func (p *ReadProbe) Close() {
	if p.buf != nil {
		C.kt_free(p.buf, C.int64_t(p.bytes))
		p.buf = nil
	}
}

// Median returns the median of xs (the mean of the middle two for an even
// count; 0 for none). xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Threads returns the number of threads that read the buffer.
func (p *ReadProbe) Threads() int { return p.threads }
