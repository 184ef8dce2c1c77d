// Package expertdist records how often the router picks each routed
// expert, as SGLang's expert-distribution recorder does in its "stat" mode
// (--expert-distribution-recorder-mode stat): per forward pass a
// [layers, experts] count of (token, expert) picks, kept in a ring of the
// last --expert-distribution-recorder-buffer-size passes, and dumped on
// request as expert_distribution_recorder_{unix time}.pt — a torch.save
// dict {"rank": 0, "logical_count": int32 [buffer, layers, experts]} that
// --kt-expert-placement-strategy frequency --init-expert-location reads
// (here and in SGLang).
package expertdist

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ktserve/kt/internal/settings"

	"github.com/ktserve/kt/internal/torchpt"
)

// Recorder counts routed-expert picks per forward pass while recording is
// on. Add and EndPass are called by the model's step (one goroutine);
// Start, Stop and Dump by anyone (the HTTP handlers). The zero value is not
// usable: see New.
type Recorder struct {
	layers, experts int
	dir             string
	now             func() time.Time

	on atomic.Bool

	mu     sync.Mutex
	pass   []int32   // this pass's counts, [layers*experts]
	dirty  bool      // pass has counts
	last   int       // the layer Add saw last in the open pass
	ring   [][]int32 // the last len(ring) passes; one running sum when sum
	sum    bool      // buffer -1: ring[0] accumulates every pass
	next   int       // ring slot of the next pass
	passes int64     // passes recorded since Start

	dumpMu sync.Mutex
	dumps  []string // the files Dump wrote, oldest first, at most MaxDumps
}

// MaxDumps is how many dump files a recorder keeps: each Dump past it
// deletes the oldest file the recorder wrote, so repeated dump requests
// cannot fill the disk.
const MaxDumps = 16

// New makes a recorder for a model of layers layers (num_hidden_layers:
// dense layers' rows stay zero) with experts routed experts per layer.
// buffer is how many passes the dump holds (SGLang's buffer size; -1 keeps
// one running sum of every pass instead). dir is where Dump writes ("":
// $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR, else /tmp).
func New(layers, experts, buffer int, dir string) (*Recorder, error) {
	if layers <= 0 || experts <= 0 {
		return nil, fmt.Errorf("expertdist: %d layers of %d experts", layers, experts)
	}
	if buffer == 0 || buffer < -1 {
		return nil, fmt.Errorf("expertdist: buffer size %d: want a positive number of passes, or -1 for a running sum", buffer)
	}
	slots := buffer
	if buffer == -1 {
		slots = 1
	}
	if int64(slots)*int64(layers)*int64(experts) > 1<<28 {
		return nil, fmt.Errorf("expertdist: buffer of %d passes x %d layers x %d experts is over 2^28 counts", slots, layers, experts)
	}
	if dir == "" {
		dir = settings.ExpertDistDir.Get()
	}
	if dir == "" {
		dir = os.TempDir()
	}
	r := &Recorder{layers: layers, experts: experts, dir: dir, now: time.Now, sum: buffer == -1,
		pass: make([]int32, layers*experts), ring: make([][]int32, slots)}
	for i := range r.ring {
		r.ring[i] = make([]int32, layers*experts)
	}
	return r, nil
}

// Recording reports whether counts are being taken (cheap: the model path
// asks every step).
func (r *Recorder) Recording() bool { return r != nil && r.on.Load() }

// Start clears the buffer and starts recording.
func (r *Recorder) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, row := range r.ring {
		clear(row)
	}
	clear(r.pass)
	r.dirty, r.next, r.passes = false, 0, 0
	r.on.Store(true)
}

// Stop stops recording; the buffer is kept for Dump.
func (r *Recorder) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on.Store(false)
	r.commit()
}

// Add counts the expert ids (row-major [tokens, top-k]; ids < 0 — padding
// or experts masked out — are skipped) the router picked in layer. A
// forward pass visits its MoE layers in increasing order, once each, so a
// layer at or below the last one Add saw starts a new pass (EndPass closes
// one explicitly).
func (r *Recorder) Add(layer int, ids []int32) {
	if !r.Recording() || layer < 0 || layer >= r.layers {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dirty && layer <= r.last {
		r.commit()
	}
	r.last = layer
	row := r.pass[layer*r.experts : (layer+1)*r.experts]
	for _, e := range ids {
		if e >= 0 && int(e) < r.experts {
			row[e]++
			r.dirty = true
		}
	}
}

// EndPass closes the forward pass whose picks Add counted.
func (r *Recorder) EndPass() {
	if !r.Recording() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commit()
}

// commit moves the open pass into the ring (r.mu held).
func (r *Recorder) commit() {
	if !r.dirty {
		return
	}
	slot := r.ring[r.next]
	if r.sum {
		for i, c := range r.pass {
			slot[i] += c
		}
	} else {
		copy(slot, r.pass)
		r.next = (r.next + 1) % len(r.ring)
	}
	clear(r.pass)
	r.dirty, r.last = false, -1
	r.passes++
}

// Dump writes the buffer to <dir>/expert_distribution_recorder_{unix
// time}.pt and returns the path; past MaxDumps files it deletes the oldest
// one it wrote. Recording goes on if it was on.
func (r *Recorder) Dump() (string, error) {
	r.dumpMu.Lock()
	defer r.dumpMu.Unlock()
	path, err := r.write()
	if err != nil {
		return "", err
	}
	if i := slices.Index(r.dumps, path); i >= 0 {
		r.dumps = slices.Delete(r.dumps, i, i+1) // the same stamp: overwritten
	}
	r.dumps = append(r.dumps, path)
	for len(r.dumps) > MaxDumps {
		if err := os.Remove(r.dumps[0]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return path, fmt.Errorf("expertdist: removing the oldest dump: %w", err)
		}
		r.dumps = r.dumps[1:]
	}
	return path, nil
}

// write writes the buffer to a new dump file and returns its path.
func (r *Recorder) write() (string, error) {
	r.mu.Lock()
	lc := &torchpt.IntTensor{Shape: []int{len(r.ring), r.layers, r.experts}}
	lc.Data = make([]int32, 0, len(r.ring)*r.layers*r.experts)
	for _, row := range r.ring {
		lc.Data = append(lc.Data, row...)
	}
	passes := r.passes
	r.mu.Unlock()

	t := r.now()
	stamp := strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 6, 64)
	name := "expert_distribution_recorder_" + stamp
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return "", fmt.Errorf("expertdist: dump: %w", err)
	}
	path := filepath.Join(r.dir, name+".pt")
	tmp, err := os.CreateTemp(r.dir, name+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("expertdist: dump: %w", err)
	}
	defer os.Remove(tmp.Name())
	obj := map[string]any{"rank": 0, "logical_count": lc, "num_passes": int(passes)}
	if err := torchpt.Save(tmp, name, obj); err != nil {
		tmp.Close()
		return "", fmt.Errorf("expertdist: dump %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("expertdist: dump %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("expertdist: dump %s: %w", path, err)
	}
	return path, nil
}
