// Package runbase is the plumbing every model runner in arch/ shares:
// opening the checkpoint and the backend, fetching weights with their shape
// checked, the KV page pool and its reservations, laying out a model.Batch
// as a backend.Step (with the checks that keep a bad batch an error), and
// the final norm and lm head over only the rows whose logits are wanted.
// A model definition keeps what is its own: its layers and their forward
// pass.
package runbase

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ktserve/kt/arch"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cpu"
	"github.com/ktserve/kt/kvcache"
	"github.com/ktserve/kt/model"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/moe/expertsource"
	"github.com/ktserve/kt/safetensors"
	"github.com/ktserve/kt/tensor"
	"github.com/ktserve/kt/tp"
)

// Base is the shared part of a loaded model runner. Its methods that match
// model.Runner's (Reserve, Free, FreeTokens) are what a runner forwards to.
type Base struct {
	Name string          // the model package, prefix of every error ("qwen3moe")
	Dir  string          // the model directory
	Opts arch.Options    // with defaults filled
	BE   backend.Backend // runs the ops
	Ckpt *safetensors.Checkpoint
	Pool *kvcache.Pool // KV page bookkeeping, made by AllocStep
	Info model.Info
	Step backend.Step // the step being run, laid out by Begin
	// FP8Block is quantization_config.weight_block_size of an fp8
	// checkpoint ([bn, bk]); zero otherwise.
	FP8Block [2]int
	// Int4Group is the group size of a compressed-tensors pack-quantized
	// INT4 checkpoint (0 for others): Host reads a weight stored packed.
	Int4Group int
	// TP is the runner's rank of a tensor-parallel model (Opts.TP); nil
	// without tensor parallelism (tp.go).
	TP tp.Comm

	ownBE   bool
	seen    []bool
	logRows int // rows of the logits buffer per lm-head block
	sel     backend.Tensor
	logits  backend.Tensor
	// with tensor parallelism: the rank's vocabulary rows (Embedding, the
	// lm head's too) and its logits columns [logRows, vocab.Count],
	// gathered into logits
	vocab    tp.Span
	logShard backend.Tensor
	hostLog  []float32
	rowsBuf  [][]float32
	// the greedy picks the backend makes after the lm head (backend.Picker;
	// nil picker: the backend has none): F32 [logRows, 2], and their copy
	picker   backend.Picker
	picks    backend.Tensor
	pickHost []float32
	gr       graphState
	pfx      prefixState
	// stateful: the model keeps recurrent state (UsePrefixState)
	stateful bool
	slotsBuf []int
}

// Open reads dir/config.json (ReadConfig: one of families), opens the
// checkpoint in dir and the backend o names (a new CPU backend when
// o.Backend is nil, closed by Close), and fills Info. name prefixes errors.
func Open(name, dir string, o arch.Options, families ...modelconfig.Family) (*Base, *modelconfig.Config, error) {
	cfg, err := ReadConfig(dir, families...)
	if err != nil {
		return nil, nil, err
	}
	o = o.WithDefaults()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	b := &Base{Name: name, Dir: dir, Opts: o, Ckpt: ck, BE: o.Backend, Info: NewInfo(dir, cfg), TP: o.TP}
	b.vocab = tp.Span{Count: cfg.VocabSize}
	if cfg.Quantization == "fp8" && len(cfg.WeightBlockSize) == 2 {
		b.FP8Block = [2]int{cfg.WeightBlockSize[0], cfg.WeightBlockSize[1]}
	}
	b.Int4Group = cfg.Int4GroupSize
	if b.BE == nil {
		b.BE = cpu.New(cpu.Options{Threads: o.Threads})
		b.ownBE = true
	}
	b.initGraphs()
	if err := b.checkTP(cfg); err != nil {
		b.Close()
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, cfg, nil
}

// Setup runs a model's weight binding and buffer allocation, wrapping
// their errors with the model's name (and dir for weights).
func (b *Base) Setup(dir string, loadWeights, allocate func() error) error {
	if err := loadWeights(); err != nil {
		return fmt.Errorf("%s: %s: %w", b.Name, dir, err)
	}
	if err := allocate(); err != nil {
		return fmt.Errorf("%s: %w", b.Name, err)
	}
	return nil
}

// Close releases the backend (when Open made it) and the checkpoint.
func (b *Base) Close() error {
	var err error
	if b.ownBE && b.BE != nil {
		err = b.BE.Close()
		b.BE = nil
	}
	if b.Ckpt != nil {
		err = errors.Join(err, b.Ckpt.Close())
		b.Ckpt = nil
	}
	return err
}

// Host fetches a float tensor from the checkpoint (zero-copy) and checks
// its shape; errors name the tensor. An F8_E4M3 matrix of an fp8
// checkpoint comes with its block scales (name+"_scale_inv", the
// checkpoint's weight_scale_inv) and the config's weight_block_size: a
// block-scaled FP8 weight (see package backend), which every backend's
// MatMul takes as it is; a 3-D one (fused experts) carries its 3-D scales
// for backend.ExpertRows.
func (b *Base) Host(name string, shape ...int) (backend.Host, error) {
	t, err := b.Ckpt.Tensor(name)
	if err != nil {
		h, ok, perr := expertsource.PackedInt4For(b.Ckpt, name, b.Int4Group)
		if !ok {
			return backend.Host{}, err
		}
		if perr == nil && !slices.Equal(h.Shape, shape) {
			perr = fmt.Errorf("tensor %s has shape %v, want %v", h.Name, h.Shape, shape)
		}
		return h, perr
	}
	if !sameShape(t.Shape, shape) {
		return backend.Host{}, fmt.Errorf("tensor %s has shape %v, want %v", name, t.Shape, shape)
	}
	h := backend.Host{Name: name, DType: t.DType, Shape: shape, Data: t.Data}
	switch t.DType {
	case tensor.BF16, tensor.F16, tensor.F32:
		return h, nil
	case tensor.F8E4M3:
		if b.FP8Block[0] <= 0 {
			return backend.Host{}, fmt.Errorf("tensor %s is F8_E4M3 but config.json has no fp8 quantization_config with weight_block_size", name)
		}
		sc, err := b.Ckpt.Tensor(name + "_scale_inv")
		if err != nil && len(shape) == 3 {
			// transformers 5 names fused experts' scales gate_up_proj_scales_inv
			if s2, err2 := b.Ckpt.Tensor(name + "_scales_inv"); err2 == nil {
				sc, err = s2, nil
			}
		}
		if err != nil {
			return backend.Host{}, fmt.Errorf("tensor %s is F8_E4M3: its block scales: %w", name, err)
		}
		ss := make([]int, len(sc.Shape))
		for i, d := range sc.Shape {
			ss[i] = int(d)
		}
		h.Scale = &backend.Host{Name: name + "_scale_inv", DType: sc.DType, Shape: ss, Data: sc.Data}
		h.Block = b.FP8Block
		if len(shape) == 3 {
			// fused [E, O, K] experts, scales [E, ceil(O/bn), ceil(K/bk)]:
			// sliced per expert by backend.ExpertRows, which checks them
			if _, err := backend.ExpertRows(h, name, 0, 0, shape[1]); err != nil {
				return backend.Host{}, err
			}
			return h, nil
		}
		if err := h.Check(); err != nil {
			return backend.Host{}, err
		}
		return h, nil
	}
	return backend.Host{}, fmt.Errorf("tensor %s has dtype %s, want BF16, F16, F32 or F8_E4M3 (fp8 checkpoints)", name, t.DType)
}

// Weight fetches a checkpoint tensor with Host and hands it to the backend
// (in place on the CPU).
func (b *Base) Weight(name string, shape ...int) (backend.Tensor, error) {
	h, err := b.Host(name, shape...)
	if err != nil {
		return nil, err
	}
	return b.BE.Weight(h)
}

func sameShape(a []int64, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != int64(b[i]) {
			return false
		}
	}
	return true
}

// LMHead returns the lm head: lm_head.weight [vocab, hidden], or embed when
// the embeddings are tied. With tensor parallelism it is the rank's
// vocabulary rows, as Embedding's.
func (b *Base) LMHead(embed backend.Tensor, tie bool, vocab, hidden int) (backend.Tensor, error) {
	if _, has := b.Ckpt.Info("lm_head.weight"); has && !tie {
		return b.WeightSplit("lm_head.weight", RowSplit(b.Layout().Vocab(vocab)), vocab, hidden)
	}
	if tie {
		return embed, nil
	}
	return nil, errors.New("tensor lm_head.weight missing and tie_word_embeddings is false")
}

// AllocStep makes the KV page pool and the per-step buffers: the step
// layout for Opts.MaxBatchTokens tokens and the lm head's row blocks.
// When decode steps may run as graphs (graph.go), the pool has one more
// slot and page, for the padding rows, and the backend's step buffers are
// sized for the largest step at once.
func (b *Base) AllocStep(hidden, vocab int) error {
	o := b.Opts
	pad := b.gr.gb != nil
	tokens, slots := o.MaxTotalTokens, o.MaxSeqs
	if pad {
		tokens, slots = tokens+o.PageSize, slots+1
	}
	pool, err := kvcache.New(tokens, o.PageSize, slots)
	if err != nil {
		return err
	}
	b.Pool = pool
	b.initPrefix()
	if pad {
		b.gr.dummy = o.MaxSeqs
		if err := pool.Reserve(b.gr.dummy, 1); err != nil {
			return fmt.Errorf("reserving the padding rows' KV page: %w", err)
		}
		b.gr.dummyPgs = pool.Pages(b.gr.dummy)
		if err := b.gr.gb.ReserveStep(max(o.MaxBatchTokens, o.MaxSeqs), o.MaxSeqs, pool.NumPages()+o.MaxSeqs); err != nil {
			return err
		}
	}
	T := o.MaxBatchTokens
	b.logRows = max(min(T, 64), o.MaxSeqs)
	if b.sel, err = b.BE.Alloc(b.BE.ActDType(), b.logRows, hidden); err != nil {
		return fmt.Errorf("allocating activations: %w", err)
	}
	if b.logits, err = b.BE.Alloc(b.BE.ActDType(), b.logRows, vocab); err != nil {
		return fmt.Errorf("allocating activations: %w", err)
	}
	if b.Parallel() {
		if b.logShard, err = b.BE.Alloc(b.BE.ActDType(), b.logRows, b.Layout().Vocab(vocab).Count); err != nil {
			return fmt.Errorf("allocating activations: %w", err)
		}
	}
	if p, ok := b.BE.(backend.Picker); ok {
		if b.picks, err = b.BE.Alloc(tensor.F32, b.logRows, 2); err != nil {
			return fmt.Errorf("allocating activations: %w", err)
		}
		b.picker, b.pickHost = p, make([]float32, 2*b.logRows)
	}
	b.seen = make([]bool, o.MaxSeqs)
	b.Step.Tokens = make([]int32, 0, T)
	b.Step.Pos = make([]int32, 0, T)
	b.Step.OutRows = make([]int32, 0, T)
	b.Step.Seqs = make([]backend.Seq, 0, o.MaxSeqs)
	return nil
}

// Reserve implements model.Runner's Reserve on the page pool.
func (b *Base) Reserve(slot, n int) error { return b.Pool.Reserve(slot, n) }

// Free releases the slot's KV pages (those the prefix cache keeps stay
// there).
func (b *Base) Free(slot int) {
	b.Pool.Free(slot)
	if slot >= 0 && slot < len(b.pfx.rolled) {
		b.pfx.rolled[slot] = 0
	}
}

// FreeTokens implements model.Runner's FreeTokens.
func (b *Base) FreeTokens() int { return b.Pool.FreeTokens() }

// Begin validates the batch, lays it out in Step and hands it to the
// backend. It returns the number of tokens (rows) in the step.
func (b *Base) Begin(bt *model.Batch) (int, error) {
	if err := b.buildStep(bt); err != nil {
		return 0, err
	}
	b.padStep(bt)
	if err := b.BE.SetStep(&b.Step); err != nil {
		return 0, fmt.Errorf("%s: %w", b.Name, err)
	}
	return len(b.Step.Tokens), nil
}

// buildStep validates the batch and lays it out as a backend step.
func (b *Base) buildStep(bt *model.Batch) error {
	s, o, name := &b.Step, b.Opts, b.Name
	s.Tokens, s.Pos, s.OutRows, s.Seqs, s.Draws = s.Tokens[:0], s.Pos[:0], s.OutRows[:0], s.Seqs[:0], s.Draws[:0]
	s.Live = 0
	clear(b.seen)
	if len(bt.Chunks) == 0 {
		return fmt.Errorf("%s: empty batch", name)
	}
	total := 0
	for i, c := range bt.Chunks {
		total += len(c.Tokens)
		if c.Slot < 0 || c.Slot >= o.MaxSeqs {
			return fmt.Errorf("%s: chunk %d: slot %d outside [0,%d)", name, i, c.Slot, o.MaxSeqs)
		}
		if b.seen[c.Slot] {
			return fmt.Errorf("%s: chunk %d: slot %d appears twice in one batch", name, i, c.Slot)
		}
		b.seen[c.Slot] = true
		if c.Adapter != 0 {
			if c.Adapter != 1 || o.LoRA == nil || o.LoRA.Named == nil {
				return fmt.Errorf("%s: chunk %d (slot %d) asks for LoRA adapter %d, which is not loaded", name, i, c.Slot, c.Adapter)
			}
		}
		if len(c.Tokens) == 0 {
			return fmt.Errorf("%s: chunk %d (slot %d) has no tokens", name, i, c.Slot)
		}
		if c.Pos != b.Pool.Len(c.Slot) {
			return fmt.Errorf("%s: chunk %d: slot %d is at position %d, chunk says %d", name, i, c.Slot, b.Pool.Len(c.Slot), c.Pos)
		}
		if end := c.Pos + len(c.Tokens); end > b.Pool.Capacity(c.Slot) {
			return fmt.Errorf("%s: chunk %d: slot %d reserved %d tokens, chunk needs %d", name, i, c.Slot, b.Pool.Capacity(c.Slot), end)
		} else if end > b.Info.ContextLen {
			return fmt.Errorf("%s: chunk %d: slot %d would reach %d tokens, past the context length %d", name, i, c.Slot, end, b.Info.ContextLen)
		}
	}
	if total > o.MaxBatchTokens {
		return fmt.Errorf("%s: batch has %d tokens, more than the %d per step", name, total, o.MaxBatchTokens)
	}
	V := b.Info.VocabSize
	for _, c := range bt.Chunks {
		start := len(s.Tokens)
		for j, t := range c.Tokens {
			if t < 0 || int(t) >= V {
				return fmt.Errorf("%s: slot %d token %d is %d, outside the vocabulary [0,%d)", name, c.Slot, j, t, V)
			}
			s.Tokens = append(s.Tokens, t)
			s.Pos = append(s.Pos, int32(c.Pos+j))
		}
		s.Seqs = append(s.Seqs, backend.Seq{Slot: c.Slot, Start: start, Len: len(c.Tokens), Pos: c.Pos, Pages: b.Pool.Pages(c.Slot), Adapter: c.Adapter})
		if c.AllLogits {
			for j := range c.Tokens {
				s.OutRows = append(s.OutRows, int32(start+j))
			}
		} else {
			s.OutRows = append(s.OutRows, int32(len(s.Tokens)-1))
		}
	}
	if b.picker != nil && pickOnly(bt) {
		for _, c := range bt.Chunks {
			s.Draws = append(s.Draws, c.Draw)
		}
	}
	return nil
}

// Sync waits for the backend's ops and returns their first error.
func (b *Base) Sync() error {
	err := b.BE.Sync()
	if b.TP != nil {
		err = errors.Join(err, b.TP.Err())
	}
	if err != nil {
		return fmt.Errorf("%s: forward: %w", b.Name, err)
	}
	return nil
}

// Finish ends a step begun with Begin: the final rmsnorm (weight norm, eps)
// and the lm head on the wanted rows of the hidden states x, in blocks;
// then it advances the slots' KV lengths and hands the logits rows out in
// out (aliasing buffers reused by the next step).
func (b *Base) Finish(x, norm, lmHead backend.Tensor, eps float32, bt *model.Batch, out *model.Logits) error {
	h := Head{X: x, Norm: norm, LMHead: lmHead, Eps: eps}
	nOut := len(b.Step.OutRows)
	if nOut <= b.logRows {
		b.queueHead(h, 0, nOut)
		return b.deliver(bt, out, nOut)
	}
	V := b.Info.VocabSize
	if cap(b.hostLog) < nOut*V {
		b.hostLog = make([]float32, nOut*V)
	}
	b.hostLog = b.hostLog[:nOut*V]
	for first := 0; first < nOut; first += b.logRows {
		m := min(b.logRows, nOut-first)
		b.queueHead(h, first, m)
		if !b.Root() {
			continue // rank 0's logits are read
		}
		if err := b.BE.Read(b.hostLog[first*V:(first+m)*V], b.logits, m); err != nil {
			return fmt.Errorf("%s: forward: %w", b.Name, err)
		}
	}
	if !b.Root() {
		return b.advance(bt)
	}
	return b.hand(bt, out, b.hostLog)
}

// deliver reads the nOut logits rows queued into the logits buffer (into
// the backend's page-locked memory where it has some) and hands them out.
func (b *Base) deliver(bt *model.Batch, out *model.Logits, nOut int) error {
	V := b.Info.VocabSize
	if !b.Root() {
		return b.advance(bt) // rank 0's logits are read
	}
	if b.picker != nil && pickOnly(bt) {
		return b.handPicks(bt, out, nOut)
	}
	if gb, ok := b.BE.(backend.GraphBackend); ok {
		rows, err := gb.ReadPinned(b.logits, nOut)
		if err != nil {
			return fmt.Errorf("%s: forward: %w", b.Name, err)
		}
		return b.hand(bt, out, rows)
	}
	if cap(b.hostLog) < nOut*V {
		b.hostLog = make([]float32, nOut*V)
	}
	b.hostLog = b.hostLog[:nOut*V]
	if err := b.BE.Read(b.hostLog, b.logits, nOut); err != nil {
		return fmt.Errorf("%s: forward: %w", b.Name, err)
	}
	return b.hand(bt, out, b.hostLog)
}

// pickOnly reports whether every chunk of bt wants only its pick.
func pickOnly(bt *model.Batch) bool {
	for _, ch := range bt.Chunks {
		if !ch.PickOnly || ch.AllLogits {
			return false
		}
	}
	return len(bt.Chunks) > 0
}

// handPicks ends a step whose chunks want only their picks, which
// queueHead had the backend make: it reads them (two numbers per row)
// instead of the logits rows.
func (b *Base) handPicks(bt *model.Batch, out *model.Logits, nOut int) error {
	if err := b.BE.Read(b.pickHost[:2*nOut], b.picks, nOut); err != nil {
		return fmt.Errorf("%s: forward: %w", b.Name, err)
	}
	if err := b.advance(bt); err != nil {
		return err
	}
	out.Rows = out.Rows[:0]
	out.Picks = out.Picks[:0]
	for i := range bt.Chunks {
		out.Picks = append(out.Picks, model.Pick{ID: int32(b.pickHost[2*i]), Logprob: float64(b.pickHost[2*i+1])})
	}
	return nil
}

// advance ends a step: it waits for the backend, then the slots' KV
// lengths advance and their recurrent-state snapshots roll.
func (b *Base) advance(bt *model.Batch) error {
	if err := b.Sync(); err != nil {
		return err
	}
	b.slotsBuf = b.slotsBuf[:0]
	for _, ch := range bt.Chunks {
		if err := b.Pool.Advance(ch.Slot, len(ch.Tokens)); err != nil {
			return fmt.Errorf("%s: %w", b.Name, err)
		}
		b.slotsBuf = append(b.slotsBuf, ch.Slot)
	}
	return b.rollSnapshots(b.slotsBuf)
}

// hand ends a step whose logits rows are in log (in output-row order):
// the slots' KV lengths advance and out's rows alias log.
func (b *Base) hand(bt *model.Batch, out *model.Logits, log []float32) error {
	V := b.Info.VocabSize
	nOut := 0
	for _, ch := range bt.Chunks {
		if ch.AllLogits {
			nOut += len(ch.Tokens)
		} else {
			nOut++
		}
	}
	if err := b.advance(bt); err != nil {
		return err
	}
	out.Picks = out.Picks[:0]
	if cap(out.Rows) < len(bt.Chunks) {
		out.Rows = make([][][]float32, len(bt.Chunks))
	}
	out.Rows = out.Rows[:len(bt.Chunks)]
	if cap(b.rowsBuf) < nOut {
		b.rowsBuf = make([][]float32, nOut)
	}
	b.rowsBuf = b.rowsBuf[:nOut]
	for i := range b.rowsBuf {
		b.rowsBuf[i] = log[i*V : (i+1)*V : (i+1)*V]
	}
	j := 0
	for i, ch := range bt.Chunks {
		m := 1
		if ch.AllLogits {
			m = len(ch.Tokens)
		}
		out.Rows[i] = b.rowsBuf[j : j+m : j+m]
		j += m
	}
	return nil
}
