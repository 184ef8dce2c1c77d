package runbase

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/model"
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
// Piecewise graphs: a model whose step must hand work to the host between
// its GPU ops (the hybrid step's CPU experts) asks for them at load
// (PiecewiseGraphs). Its decode steps are then captured as a sequence of
// graphs: while the step is recorded, the model calls Cut at each
// hand-off, which ends one graph and begins the next, and gives the host
// work to run there. A replay launches the first graph, runs the first
// hand-off on the calling thread, launches the second graph, and so on;
// the last graph ends with the lm head. Buckets, padding, warm-up steps,
// epochs and the switches below apply unchanged.
//
// Options.DisableCUDAGraph turns graphs off; Options.EagerGraphSteps pads
// decode steps exactly as the graph path does but runs them op by op (the
// reference the graph path is tested against).

type graphState struct {
	gb       backend.GraphBackend // nil: every step runs op by op
	off      string
	eagerPad bool
	maxBS    int
	buckets  []int
	dummy    int // the padding rows' slot, -1 without padding
	dummyPgs []int32
	byKey    map[int]*stepGraph
	stats    arch.GraphStats

	key  int // bucket of the step begun last; 0: op by op
	real int // chunks of the step begun last

	piecewise bool                                   // steps are captured in pieces (PiecewiseGraphs)
	cut       func(after, finish func() error) error // Cut and CutAhead, while a piecewise step is recorded
}

type stepGraph struct {
	g      backend.StepGraph
	segs   []segment // piecewise: the step's graphs in order (g is nil)
	epoch  uint64
	warm   bool
	failed bool
}

// segment is one graph of a piecewise step and the host work that runs
// after it is launched, before the next one is (nil for the last), and the
// work that runs after the next one is launched (CutAhead; nil: none).
type segment struct {
	g             backend.StepGraph
	after, finish func() error
}

// segmentCapturer is a GraphBackend that can record a step as several
// graphs (the CUDA backend): each call of cut ends one and begins the next.
type segmentCapturer interface {
	CaptureSegments(fn func(cut func() error)) ([]backend.StepGraph, error)
}

// live reports whether the bucket has a graph (or graphs) to replay.
func (sg *stepGraph) live() bool { return sg.g != nil || sg.segs != nil }

// destroy releases the bucket's graphs.
func (sg *stepGraph) destroy() {
	if sg.g != nil {
		sg.g.Destroy()
	}
	for _, s := range sg.segs {
		s.g.Destroy()
	}
	sg.g, sg.segs = nil, nil
}

// replay queues the bucket's graphs: one graph, or the pieces with their
// host work in between (which waits for what it needs of the GPU): a
// piece's after, then the next piece's launch, then the piece's finish. A
// hand-off that fails stops the step there; a finish whose after returned
// nil runs whatever follows (it is what lets the queued piece go on).
func (sg *stepGraph) replay(gb backend.GraphBackend) error {
	if sg.g != nil {
		gb.ReplayStep(sg.g)
		return nil
	}
	var finish func() error // the previous piece's, once this one is launched
	for _, s := range sg.segs {
		gb.ReplayStep(s.g)
		if finish != nil {
			if err := finish(); err != nil {
				return err
			}
		}
		if s.after != nil {
			if err := s.after(); err != nil {
				return err
			}
		}
		finish = s.finish // nil for the last piece: no hand-off ends it
	}
	return nil
}

// capturePieces records queue's ops as the pieces its Cut calls delimit.
func (g *graphState) capturePieces(sc segmentCapturer, queue func() error) ([]segment, error) {
	var hands []segment // each cut's host work, the graph ending there set below
	var qerr error
	graphs, err := sc.CaptureSegments(func(cut func() error) {
		g.cut = func(after, finish func() error) error {
			if err := cut(); err != nil {
				return err
			}
			hands = append(hands, segment{after: after, finish: finish})
			return nil
		}
		qerr = queue()
	})
	g.cut = nil
	if err == nil {
		err = qerr
	}
	if err == nil && len(graphs) != len(hands)+1 {
		err = fmt.Errorf("%d graphs recorded for %d cuts", len(graphs), len(hands))
	}
	if err != nil {
		for _, gr := range graphs {
			gr.Destroy()
		}
		return nil, err
	}
	segs := append(hands, segment{}) // the last graph ends with no cut
	for i, gr := range graphs {
		segs[i].g = gr
	}
	return segs, nil
}

// initGraphs decides, at Open, whether decode steps may run as graphs.
func (b *Base) initGraphs() {
	g := &b.gr
	g.dummy = -1
	gb, ok := b.BE.(backend.GraphBackend)
	switch {
	case !ok:
		g.off = "the backend " + b.BE.Name() + " does not record graphs"
	case b.Opts.DisableCUDAGraph:
		g.off = "--disable-cuda-graph"
	case !b.Opts.LoRA.Empty():
		g.off = "LoRA adapters are served (as SGLang, graphs are off with LoRA)"
	}
	if g.off != "" {
		g.stats.Off = g.off
		return
	}
	g.gb = gb
	g.eagerPad = b.Opts.EagerGraphSteps
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
		sg.destroy()
	}
	g.byKey = nil
	g.gb, g.off, g.stats.Off = nil, why, why
}

// PiecewiseGraphs asks for decode steps to be captured in pieces that the
// model delimits with Cut (see the comment at the top of this file). It
// reports false, and why, when graphs are off or the backend cannot record
// a step in pieces; decode steps are then as they were.
func (b *Base) PiecewiseGraphs() (ok bool, why string) {
	g := &b.gr
	if g.gb == nil {
		return false, g.off
	}
	if _, ok := g.gb.(segmentCapturer); !ok {
		return false, "the backend " + b.BE.Name() + " does not record a step as several graphs"
	}
	g.piecewise = true
	return true, ""
}

// DecodeGraphStep reports whether the step being queued is a padded
// decode step of the graph path (run eagerly, captured or replayed): its
// ops must be the same every time its bucket runs.
func (b *Base) DecodeGraphStep() bool { return b.gr.key != 0 }

// CapturingPieces reports whether a piecewise step is being recorded, so
// that the model's hand-offs must call Cut.
func (b *Base) CapturingPieces() bool { return b.gr.cut != nil }

// Cut ends the graph being recorded of a piecewise step and begins the
// next one; at every replay, after launching the graph that ends here,
// after runs on the calling thread before the next graph is launched (the
// hybrid step: wait for the layer's copies to host, run the CPU experts).
// After an error the model must stop queueing the step and return it.
func (b *Base) Cut(after func() error) error { return b.CutAhead(after, nil) }

// CutAhead is Cut with the hand-off in two parts: at every replay after
// runs once the graph that ends here is launched, then the next graph is
// launched, then finish runs. after may so start host work and queue on
// the stream what holds the next graph back until finish lets it go (the
// hybrid step: submit the CPU experts, queue a wait for a value finish
// stores once they are done), and the next graph's launch costs no time
// after the host work. Once after returned nil, finish runs even if the
// next launch is the step's last.
func (b *Base) CutAhead(after, finish func() error) error {
	if b.gr.cut == nil {
		return fmt.Errorf("runbase: Cut outside the recording of a piecewise step")
	}
	return b.gr.cut(after, finish)
}

// GraphStats reports what the decode graph path did so far.
func (b *Base) GraphStats() arch.GraphStats { return b.gr.stats }

// StateSlots is the number of recurrent-state slots a model allocates:
// MaxSeqs, plus the padding rows' slot when decode steps may be padded,
// plus the prefix cache's (one rolling snapshot per slot and
// Opts.PrefixSnapshots kept ones) when it keeps snapshots.
func (b *Base) StateSlots() int {
	n := b.seqStateSlots()
	if b.Opts.PrefixSnapshots > 0 {
		n += b.Opts.MaxSeqs + b.Opts.PrefixSnapshots
	}
	return n
}

// seqStateSlots is the number of state slots steps run in.
func (b *Base) seqStateSlots() int {
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
	if len(s.Tokens) < key {
		s.Live = len(s.Tokens) // the padding rows route to no expert (backend.Step.Live)
	}
	for i := len(s.Tokens); i < key; i++ {
		s.Tokens = append(s.Tokens, 0)
		s.Pos = append(s.Pos, 0)
		s.Seqs = append(s.Seqs, backend.Seq{Slot: g.dummy, Start: i, Len: 1, Pos: 0, Pages: g.dummyPgs})
		s.OutRows = append(s.OutRows, int32(i))
		if len(s.Draws) > 0 {
			s.Draws = append(s.Draws, model.Draw{}) // greedy
		}
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
// its bucket is seen (and always with Options.EagerGraphSteps), captured the
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
	switch g.nextAction(sg, epoch, b.allAgree) {
	case replayGraph:
		g.stats.Replays++
		return sg.replay(g.gb)
	case runEager:
		if err := queue(); err != nil {
			return err
		}
		sg.warm = true
		return nil
	}
	var err error
	if sc, ok := g.gb.(segmentCapturer); ok && g.piecewise {
		var segs []segment
		if segs, err = g.capturePieces(sc, queue); err == nil && g.gb.GraphEpoch() != epoch {
			for _, s := range segs {
				s.g.Destroy()
			}
			err = fmt.Errorf("a buffer moved while capturing")
		} else if err == nil {
			sg.segs = segs
		}
	} else {
		var qerr error
		var gr backend.StepGraph
		gr, err = g.gb.CaptureStep(func() { qerr = queue() })
		if err == nil && qerr == nil && g.gb.GraphEpoch() == epoch {
			sg.g = gr
		} else {
			if gr != nil {
				gr.Destroy()
			}
			if err == nil {
				err = qerr
			}
			if err == nil {
				err = fmt.Errorf("a buffer moved while capturing")
			}
		}
	}
	err = agreeCaptured(sg, err, b.allAgree)
	if err == nil {
		sg.epoch = epoch
		g.stats.Captures++
		g.stats.Segments = max(1, len(sg.segs))
		g.stats.Replays++
		return sg.replay(g.gb)
	}
	sg.failed = true
	g.stats.Failed = fmt.Sprintf("batch %d: %v", g.key, err)
	slog.Warn("decode step graph capture failed; the step runs op by op", "model", b.Name, "batch", g.key, "err", err)
	return queue()
}

// graphAction is what a decode step of a bucket does.
type graphAction int

const (
	replayGraph  graphAction = iota // replay the bucket's graph (or pieces)
	runEager                        // run op by op
	captureGraph                    // record the bucket's graph, then replay it
)

// nextAction decides a decode step of bucket sg at the backend's graph
// epoch: a graph recorded before a buffer moved is dropped (and its
// bucket warms up again); replay when there is a graph, else op by op
// for a bucket's first step (or with Options.EagerGraphSteps, or after a
// failed capture), else capture. With tensor parallelism the ranks must
// agree (agree is AND over the ranks): a rank's graph is replayed only
// when every rank has one, and dropped when another has none, so that the
// ranks capture it again together.
func (g *graphState) nextAction(sg *stepGraph, epoch uint64, agree func(bool) bool) graphAction {
	if sg.live() && sg.epoch != epoch {
		sg.destroy()
		sg.warm = false
	}
	live := agree(sg.live())
	if !live && sg.live() {
		sg.destroy()
	}
	switch {
	case live:
		return replayGraph
	case !agree(!g.eagerPad && !sg.failed && sg.warm):
		return runEager
	}
	return captureGraph
}

// agreeCaptured is a capture's outcome (err) once every rank has said
// whether its own succeeded: a rank whose capture succeeded drops its
// graphs when another's failed, so that all run the bucket op by op.
func agreeCaptured(sg *stepGraph, err error, agree func(bool) bool) error {
	if ok := err == nil; !agree(ok) && ok {
		sg.destroy()
		return errors.New("another tensor-parallel rank's capture failed")
	}
	return err
}

// agreer is a tensor-parallel communicator whose ranks must take the same
// path in a decode step, graph or op by op (cuda.SameDeviceGroup: its
// collectives op by op meet on the host, in a graph they do not). NCCL's
// ranks need no agreement: their collectives pair up in order either way.
type agreer interface {
	AllAgree(ok bool) bool
}

// allAgree is ok on every rank, where the ranks must agree; else ok.
func (b *Base) allAgree(ok bool) bool {
	if a, is := b.TP.(agreer); is {
		return a.AllAgree(ok)
	}
	return ok
}

// queueHead queues the final norm and lm head of count wanted rows from
// first into the logits buffer.
func (b *Base) queueHead(h Head, first, count int) {
	be := b.BE
	be.GatherRows(b.sel, h.X, first, count)
	be.RMSNorm(b.sel, b.sel, h.Norm, h.Eps, count)
	if b.logShard != nil {
		// vocabulary-parallel: this rank's columns, then every rank's
		be.MatMul(b.logShard, b.sel, h.LMHead, count)
		b.TP.AllGatherCols(b.logits, b.logShard, count)
	} else {
		be.MatMul(b.logits, b.sel, h.LMHead, count)
	}
	if b.picker != nil && first == 0 {
		// the picks beside the logits: in a decode graph always, as
		// whether the step's chunks want only them changes per step (the
		// settings are the step's, read where SetStep put them)
		b.picker.Pick(b.picks, b.logits, count)
	}
}
