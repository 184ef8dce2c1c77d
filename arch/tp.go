package arch

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/sysinfo"
	"github.com/ktserve/kt/tp"
)

// A tensor-parallel model (Options.TensorParallel > 1) is one runner per
// rank, each loaded by the family's loader with Options.TP set on a backend
// of its own, behind one model.Runner (tpRunner). Every call runs on every
// rank, each on an OS thread of its own (one CUDA context per GPU), and
// the ranks' bookkeeping (KV pages, state slots, the prefix cache) stays
// identical because they get the same calls; rank 0's logits are the
// model's.

// TPDevice says where a tensor-parallel model of n ranks would run for
// Options o: "cuda" on the GPUs o.BaseGPUID.., "cpu" for o.Device "cpu", or
// an error naming why not (more ranks than GPUs, no GPU for "cuda"). "auto"
// takes the GPUs when there are enough, else the CPU.
func TPDevice(o Options, n int) (string, error) {
	switch o.Device {
	case "", "cpu":
		return "cpu", nil
	case "cuda", "auto":
		gpus := GPUCount()
		if o.BaseGPUID+n <= gpus {
			return "cuda", nil
		}
		if o.Device == "auto" {
			return "cpu", nil
		}
		return "", fmt.Errorf("--tensor-parallel-size %d from --base-gpu-id %d needs GPUs %d..%d; %d usable GPU(s) found", n, o.BaseGPUID, o.BaseGPUID, o.BaseGPUID+n-1, gpus)
	}
	return "", fmt.Errorf("--device %q: want one of auto, cuda, cpu", o.Device)
}

// openRanks opens n ranks' backends and their communicators: on the CPU n
// backends of a share of o.Threads each and a tp.Local group, each rank's
// threads pinned to its NUMA node's CPUs where the machine has several
// (cpus: per rank, nil when unpinned); on the GPU one backend per GPU and
// an NCCL group (openGPUGroup).
func openRanks(o Options, n int) (bes []backend.Backend, g tp.Group, cpus [][]int, note string, err error) {
	dev, err := TPDevice(o, n)
	if err != nil {
		return nil, nil, nil, "", err
	}
	if dev == "cuda" {
		bes, g, err := openGPUGroup(o, n)
		if err != nil {
			return nil, nil, nil, "", fmt.Errorf("--tensor-parallel-size %d: %w", n, err)
		}
		return bes, g, nil, fmt.Sprintf("tensor parallel over %d GPUs from %d (NCCL): rank 0 on %s", n, o.BaseGPUID, bes[0].Name()), nil
	}
	threads := o.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	per := max(threads/n, 1)
	cpus = tp.CPUGroups(sysinfo.NodeCores(os.DirFS("/"), cpu.AllowedCPUs()), n)
	bes = make([]backend.Backend, n)
	var pinErr error
	for r := range bes {
		var mine []int
		if cpus != nil {
			mine = cpus[r]
		}
		b := cpu.New(cpu.Options{Threads: per, CPUs: mine})
		if err := b.PinErr(); err != nil && pinErr == nil {
			pinErr = fmt.Errorf("rank %d: %w", r, err)
		}
		bes[r] = b
	}
	g, err = tp.NewLocal(n)
	if err != nil {
		return nil, nil, nil, "", err
	}
	note = fmt.Sprintf("tensor parallel over %d CPU ranks of %d threads each: %s", n, per, bes[0].Name())
	switch {
	case pinErr != nil:
		note += "; not pinned to NUMA nodes: " + pinErr.Error()
	case cpus != nil:
		note += "; each rank's threads pinned to its NUMA node's CPUs (" + describeGroups(cpus) + ")"
	}
	return bes, g, cpus, note, nil
}

// describeGroups says which CPUs each rank runs on ("rank 0: 0-7, rank 1:
// 8-15").
func describeGroups(cpus [][]int) string {
	var parts []string
	for r, cs := range cpus {
		parts = append(parts, fmt.Sprintf("rank %d: %s", r, cpuList(cs)))
	}
	return strings.Join(parts, ", ")
}

// cpuList writes cpus as a Linux cpulist ("0-3,8"), in increasing order.
func cpuList(cpus []int) string {
	s := slices.Sorted(slices.Values(cpus))
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		} else {
			parts = append(parts, strconv.Itoa(s[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// loadTP loads the model in dir as o.TensorParallel ranks with fn.
func loadTP(dir string, fn LoadFunc, o Options) (model.Runner, error) {
	if o.Backend != nil || o.TP != nil {
		return nil, errors.New("tensor parallelism: each rank opens its own backend; Options.Backend and Options.TP must be unset")
	}
	bes, g, cpus, note, err := openRanks(o, o.TensorParallel)
	if err != nil {
		return nil, err
	}
	return loadRanks(dir, fn, o, bes, g, cpus, note)
}

// LoadRanks loads the model in dir as a tensor-parallel model of one rank
// per backend of bes, rank r on bes[r] with g.Comm(r): what Load makes for
// Options.TensorParallel, on backends and a group the caller made (several
// ranks on one GPU with cuda.SameDeviceGroup, to test the partitioning on
// one device). o.Backend, o.TP and o.TensorParallel are set per rank. The
// runner closes bes and g, also when LoadRanks fails.
func LoadRanks(dir string, o Options, bes []backend.Backend, g tp.Group) (model.Runner, error) {
	fn, err := loaderFor(dir)
	if err == nil && g.Size() != len(bes) {
		err = fmt.Errorf("tensor parallelism: %d backends for a group of %d ranks", len(bes), g.Size())
	}
	if err != nil {
		for _, b := range bes {
			b.Close()
		}
		g.Close()
		return nil, err
	}
	return loadRanks(dir, fn, o.WithDefaults(), bes, g, nil, fmt.Sprintf("tensor parallel over %d ranks: rank 0 on %s", len(bes), bes[0].Name()))
}

// loadRanks loads the ranks with fn on bes and g, rank r's worker thread
// pinned to cpus[r][0] (cpus nil: unpinned), noting note.
func loadRanks(dir string, fn LoadFunc, o Options, bes []backend.Backend, g tp.Group, cpus [][]int, note string) (model.Runner, error) {
	n := len(bes)
	t := &tpRunner{group: g, bes: bes, ranks: make([]model.Runner, n), outs: make([]model.Logits, n)}
	if err := t.start(n, cpus); err != nil {
		note += "; rank threads not pinned: " + err.Error()
	}
	if o.ExpertRecorder != nil {
		t.rec = &stepRecorder{rec: o.ExpertRecorder}
		o.ExpertRecorder = t.rec
	}
	err := t.each(func(r int) error {
		ro := o
		ro.Backend, ro.TP, ro.TensorParallel = bes[r], g.Comm(r), 0
		if r > 0 {
			ro.Notify = nil
		}
		rr, err := fn(dir, ro)
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		t.ranks[r] = rr
		return nil
	})
	if err != nil {
		t.Close()
		return nil, err
	}
	t.info = t.ranks[0].Info()
	if o.Notify != nil {
		o.Notify(note)
	}
	return t, nil
}

// tpRunner is a tensor-parallel model: the ranks' runners run together.
type tpRunner struct {
	group tp.Group
	bes   []backend.Backend
	ranks []model.Runner
	outs  []model.Logits // the other ranks' (empty) results
	info  model.Info
	rec   *stepRecorder // the ranks' expert recorder; nil without one
	jobs  []chan func()
	wg    sync.WaitGroup
	// each's per-call state
	mu    sync.Mutex
	first error
	done  sync.WaitGroup
}

var (
	_ model.Runner         = (*tpRunner)(nil)
	_ model.PrefixCache    = (*tpRunner)(nil)
	_ model.PrefixBrancher = (*tpRunner)(nil)
)

// start starts one worker per rank, each on an OS thread of its own,
// rank r's bound to cpus[r][0] when cpus is set (the rank's backend pins
// its other workers); it returns the first failure to bind, the workers
// running unbound then.
func (t *tpRunner) start(n int, cpus [][]int) error {
	t.jobs = make([]chan func(), n)
	pinned := make(chan error, n)
	for r := range t.jobs {
		t.jobs[r] = make(chan func())
		t.wg.Add(1)
		go func(jobs chan func()) {
			defer t.wg.Done()
			runtime.LockOSThread()
			if cpus != nil && len(cpus[r]) > 0 {
				// a bound thread ends with the worker (locked at exit)
				pinned <- cpu.PinThread(cpus[r][:1])
			} else {
				pinned <- nil
				defer runtime.UnlockOSThread()
			}
			for f := range jobs {
				f()
			}
		}(t.jobs[r])
	}
	var err error
	for range n {
		if e := <-pinned; e != nil && err == nil {
			err = e
		}
	}
	return err
}

// each runs fn for every rank on the rank's worker and waits for all. The
// first rank to fail aborts the group's collectives, so that the others
// return instead of waiting for it; that first error is returned.
func (t *tpRunner) each(fn func(r int) error) error {
	t.first = nil
	t.done.Add(len(t.jobs))
	for r, jobs := range t.jobs {
		jobs <- func() {
			defer t.done.Done()
			if err := fn(r); err != nil {
				t.mu.Lock()
				if t.first == nil {
					t.first = err
					t.group.Abort(err)
				}
				t.mu.Unlock()
			}
		}
	}
	t.done.Wait()
	if t.first != nil {
		t.group.Reset()
	}
	return t.first
}

// Info implements model.Runner.
func (t *tpRunner) Info() model.Info { return t.info }

// Reserve implements model.Runner.
func (t *tpRunner) Reserve(slot, n int) error {
	return t.each(func(r int) error { return t.ranks[r].Reserve(slot, n) })
}

// Forward implements model.Runner: every rank runs the step; rank 0's
// logits are the result.
func (t *tpRunner) Forward(b *model.Batch, out *model.Logits) error {
	if t.rec != nil {
		t.rec.on = t.rec.rec.Recording()
	}
	return t.each(func(r int) error {
		o := out
		if r > 0 {
			o = &t.outs[r]
		}
		return t.ranks[r].Forward(b, o)
	})
}

// stepRecorder is the ranks' view of Options.ExpertRecorder: whether it
// records is read once per step, before the ranks start it, so that every
// rank takes the same path (a recording step runs op by op and unpadded,
// another may be padded to a graph bucket) even when the recorder is
// switched mid-step.
type stepRecorder struct {
	rec ExpertRecorder
	on  bool // Recording at the start of the step (written before the ranks run it)
}

// Recording implements ExpertRecorder: the step's snapshot.
func (s *stepRecorder) Recording() bool { return s.on }

// Add implements ExpertRecorder.
func (s *stepRecorder) Add(layer int, ids []int32) { s.rec.Add(layer, ids) }

// Free implements model.Runner.
func (t *tpRunner) Free(slot int) {
	t.each(func(r int) error { t.ranks[r].Free(slot); return nil })
}

// FreeTokens implements model.Runner: rank 0's count, which every rank's
// pool shares (bookkeeping only, read on the calling goroutine).
func (t *tpRunner) FreeTokens() int { return t.ranks[0].FreeTokens() }

// Close implements model.Runner: the ranks' runners, the communicators,
// the backends and the workers.
func (t *tpRunner) Close() error {
	var errs []error
	if t.jobs != nil {
		var mu sync.Mutex
		t.each(func(r int) error {
			var err error
			if t.ranks[r] != nil {
				err = t.ranks[r].Close()
			}
			if t.bes[r] != nil {
				err = errors.Join(err, t.bes[r].Close())
			}
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			return nil
		})
		for _, c := range t.jobs {
			close(c)
		}
		t.wg.Wait()
		t.jobs = nil
	}
	if t.group != nil {
		errs = append(errs, t.group.Close())
		t.group = nil
	}
	return errors.Join(errs...)
}

// Unwrap returns rank 0's runner, for its optional read-only interfaces
// (model.As); the prefix cache, which changes state, is tpRunner's own.
func (t *tpRunner) Unwrap() model.Runner { return t.ranks[0] }

// Rank returns rank r's runner.
func (t *tpRunner) Rank(r int) model.Runner { return t.ranks[r] }

// prefix runs fn on every rank's prefix cache; rank 0's result counts.
func (t *tpRunner) prefix(fn func(p model.PrefixBrancher) (int, int, error)) (int, int, error) {
	var a, b int
	err := t.each(func(r int) error {
		p, ok := t.ranks[r].(model.PrefixBrancher)
		if !ok {
			return nil
		}
		x, y, err := fn(p)
		if r == 0 {
			a, b = x, y
		}
		return err
	})
	return a, b, err
}

// MatchPrefix implements model.PrefixCache on every rank.
func (t *tpRunner) MatchPrefix(slot, adapter int, tokens []int32) (int, error) {
	n, _, err := t.MatchPrefixBranch(slot, adapter, tokens)
	return n, err
}

// MatchPrefixBranch implements model.PrefixBrancher on every rank.
func (t *tpRunner) MatchPrefixBranch(slot, adapter int, tokens []int32) (int, int, error) {
	return t.prefix(func(p model.PrefixBrancher) (int, int, error) {
		return p.MatchPrefixBranch(slot, adapter, tokens)
	})
}

// CachePrefix implements model.PrefixCache on every rank.
func (t *tpRunner) CachePrefix(slot, adapter int, tokens []int32) error {
	_, _, err := t.prefix(func(p model.PrefixBrancher) (int, int, error) {
		return 0, 0, p.(model.PrefixCache).CachePrefix(slot, adapter, tokens)
	})
	return err
}

// CacheBranch implements model.PrefixBrancher on every rank.
func (t *tpRunner) CacheBranch(slot, adapter int, tokens []int32) error {
	_, _, err := t.prefix(func(p model.PrefixBrancher) (int, int, error) {
		return 0, 0, p.CacheBranch(slot, adapter, tokens)
	})
	return err
}

// FlushPrefixCache implements model.PrefixCache on every rank.
func (t *tpRunner) FlushPrefixCache() {
	t.prefix(func(p model.PrefixBrancher) (int, int, error) {
		p.(model.PrefixCache).FlushPrefixCache()
		return 0, 0, nil
	})
}

// CachedPrefixTokens implements model.PrefixCache: rank 0's count, which
// every rank's cache shares.
func (t *tpRunner) CachedPrefixTokens() int {
	if p, ok := t.ranks[0].(model.PrefixCache); ok {
		return p.CachedPrefixTokens()
	}
	return 0
}
