package runbase

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/models"
)

// Decode steps as graphs
//
// On a backend that can record a step's ops and replay them
// (backend.GraphBackend: the GPU), a decode-only step (every chunk one
// token) of up to the max batch size is padded to a batch size bucket
// (1, 2, 4, 8, then multiples of 8, as SGLang's --cuda-graph-bs) and run
// from a graph captured for that bucket: the first step of a bucket runs
// eagerly (so every scratch buffer and GEMM plan exists), the second is
// captured, every later one replays it. The step's values (token ids,
// positions, page tables, sequence lengths, output rows) are in the
// backend's step buffers, which ReserveStep fixed at load time, so a replay
// computes the step SetStep set. Padding rows are sequences of one token
// (id 0 at position 0) in a slot no request uses (MaxSeqs) with one KV page
// of their own: they compute a throw-away row and touch nothing else.
// Prefill and mixed steps run op by op. A graph is re-captured when the
// backend reports that a buffer it references moved (GraphEpoch). A capture
// that fails (an op that synchronises, as the hybrid step's CPU experts do)
// leaves that bucket eager and is logged once.
//
// KT_CUDA_GRAPH=0 (or Options.DisableCUDAGraph) turns graphs off;
// KT_CUDA_GRAPH=eager pads decode steps exactly as the graph path does but
// runs them op by op (the reference the graph path is tested against).

type graphState struct {
	gb       backend.GraphBackend // nil: every step runs op by op
	off      string
	eagerPad bool
	maxBS    int
	buckets  []int
	dummy    int // the padding rows' slot, -1 without padding
	dummyPgs []int32
	byKey    map[int]*stepGraph
	stats    models.GraphStats

	key  int // bucket of the step begun last; 0: op by op
	real int // chunks of the step begun last
}

type stepGraph struct {
	g      backend.StepGraph
	epoch  uint64
	warm   bool
	failed bool
}

// initGraphs decides, at Open, whether decode steps may run as graphs.
func (b *Base) initGraphs() {
	g := &b.gr
	g.dummy = -1
	gb, ok := b.BE.(backend.GraphBackend)
	env := strings.ToLower(strings.TrimSpace(os.Getenv("KT_CUDA_GRAPH")))
	switch {
	case !ok:
		g.off = "the backend " + b.BE.Name() + " does not record graphs"
	case b.Opts.DisableCUDAGraph:
		g.off = "--disable-cuda-graph"
	case env == "0" || env == "off" || env == "false":
		g.off = "KT_CUDA_GRAPH=" + env
	}
	if g.off != "" {
		g.stats.Off = g.off
		return
	}
	g.gb = gb
	g.eagerPad = env == "eager"
	g.maxBS = b.Opts.MaxSeqs
	if m := b.Opts.CUDAGraphMaxBS; m > 0 {
		g.maxBS = min(m, b.Opts.MaxSeqs)
	}
	g.buckets = Buckets(g.maxBS)
	g.byKey = map[int]*stepGraph{}
}

// Buckets are the padded decode batch sizes for a max batch size m: 1, 2,
// 4, 8, then every multiple of 8 below m, then m.
func Buckets(m int) []int {
	var bs []int
	for _, v := range []int{1, 2, 4} {
		if v < m {
			bs = append(bs, v)
		}
	}
	for v := 8; v < m; v += 8 {
		bs = append(bs, v)
	}
	if m >= 1 {
		bs = append(bs, m)
	}
	return bs
}

// bucket is the smallest bucket holding n sequences, 0 if none does.
func (g *graphState) bucket(n int) int {
	for _, v := range g.buckets {
		if v >= n {
			return v
		}
	}
	return 0
}

// DisableGraphs makes every step run op by op from now on (the hybrid
// step: the CPU experts' hand-off synchronises inside the step).
func (b *Base) DisableGraphs(why string) {
	g := &b.gr
	if g.gb == nil {
		return
	}
	for _, sg := range g.byKey {
		if sg.g != nil {
			sg.g.Destroy()
		}
	}
	g.byKey = nil
	g.gb, g.off, g.stats.Off = nil, why, why
}

// GraphStats reports what the decode graph path did so far.
func (b *Base) GraphStats() models.GraphStats { return b.gr.stats }

// StateSlots is the number of recurrent-state slots a model allocates:
// MaxSeqs, plus the padding rows' slot when decode steps may be padded.
func (b *Base) StateSlots() int {
	if b.gr.dummy >= 0 {
		return b.Opts.MaxSeqs + 1
	}
	return b.Opts.MaxSeqs
}

// padStep pads a decode-only step to its bucket when graphs are on; it
// sets the step's graph key (0: run op by op). While the expert recorder
// records, steps run op by op and unpadded: a replayed graph would not
// report its picks, and padding rows' picks are not the model's.
func (b *Base) padStep(bt *model.Batch) {
	g := &b.gr
	g.key, g.real = 0, len(bt.Chunks)
	if g.gb == nil || g.dummy < 0 {
		return
	}
	if rec := b.Opts.ExpertRecorder; rec != nil && rec.Recording() {
		return // counted op by op, without padding rows' picks
	}
	for _, c := range bt.Chunks {
		if len(c.Tokens) != 1 {
			return
		}
	}
	key := g.bucket(len(bt.Chunks))
	if key == 0 {
		return
	}
	s := &b.Step
	for i := len(s.Tokens); i < key; i++ {
		s.Tokens = append(s.Tokens, 0)
		s.Pos = append(s.Pos, 0)
		s.Seqs = append(s.Seqs, backend.Seq{Slot: g.dummy, Start: i, Len: 1, Pos: 0, Pages: g.dummyPgs})
		s.OutRows = append(s.OutRows, int32(i))
	}
	g.key = key
}

// Head is the end of a model's forward pass: the final norm and the lm
// head over the wanted rows of the hidden states X.
type Head struct {
	X, Norm, LMHead backend.Tensor
	Eps             float32
}

// Forward runs one step: Begin, body (the layers, queued on the backend
// for the step's n rows), the final norm and lm head, and the logits read
// back (Finish). A decode step replays its bucket's graph where there is
// one (see the comment at the top of this file).
func (b *Base) Forward(bt *model.Batch, out *model.Logits, h Head, body func(n int) error) error {
	t0 := time.Now()
	n, err := b.Begin(bt)
	if err != nil {
		return err
	}
	if b.gr.key == 0 {
		if err = body(n); err == nil {
			err = b.Finish(h.X, h.Norm, h.LMHead, h.Eps, bt, out)
		}
	} else if err = b.decodeStep(n, h, body); err == nil {
		err = b.deliver(bt, out, len(b.Step.OutRows))
	}
	if b.gr.key != 0 || n == len(bt.Chunks) { // every chunk one token: a decode step
		b.gr.stats.DecodeSteps++
		b.gr.stats.DecodeForward += time.Since(t0)
	}
	return err
}

// decodeStep queues a padded decode step of n rows: eagerly the first time
// its bucket is seen (and always with KT_CUDA_GRAPH=eager), captured the
// second time, replayed afterwards.
func (b *Base) decodeStep(n int, h Head, body func(n int) error) error {
	g := &b.gr
	queue := func() error {
		if err := body(n); err != nil {
			return err
		}
		b.queueHead(h, 0, len(b.Step.OutRows))
		return nil
	}
	sg := g.byKey[g.key]
	if sg == nil {
		sg = &stepGraph{}
		g.byKey[g.key] = sg
	}
	epoch := g.gb.GraphEpoch()
	if sg.g != nil && sg.epoch != epoch {
		sg.g.Destroy()
		sg.g, sg.warm = nil, false
	}
	switch {
	case sg.g != nil:
		g.gb.ReplayStep(sg.g)
		g.stats.Replays++
		return nil
	case g.eagerPad || sg.failed || !sg.warm:
		if err := queue(); err != nil {
			return err
		}
		sg.warm = true
		return nil
	}
	var qerr error
	gr, err := g.gb.CaptureStep(func() { qerr = queue() })
	if err == nil && qerr == nil && g.gb.GraphEpoch() == epoch {
		sg.g, sg.epoch = gr, epoch
		g.stats.Captures++
		g.gb.ReplayStep(gr)
		g.stats.Replays++
		return nil
	}
	if gr != nil {
		gr.Destroy()
	}
	if err == nil {
		err = qerr
	}
	if err == nil {
		err = fmt.Errorf("a buffer moved while capturing")
	}
	sg.failed = true
	g.stats.Failed = fmt.Sprintf("batch %d: %v", g.key, err)
	slog.Warn("decode step graph capture failed; the step runs op by op", "model", b.Name, "batch", g.key, "err", err)
	return queue()
}

// queueHead queues the final norm and lm head of count wanted rows from
// first into the logits buffer.
func (b *Base) queueHead(h Head, first, count int) {
	be := b.BE
	be.GatherRows(b.sel, h.X, first, count)
	be.RMSNorm(b.sel, b.sel, h.Norm, h.Eps, count)
	be.MatMul(b.logits, b.sel, h.LMHead, count)
}
