// Package tp is tensor parallelism's plumbing, as SGLang partitions a model:
// the communicator abstraction every rank's model code calls (Comm, made by
// a Group), and the partitioning arithmetic (Layout) that says which
// attention heads, Gated DeltaNet heads, MLP columns and vocabulary rows a
// rank holds, with the refusals when a model does not divide.
//
// A tensor-parallel model is one runner per rank, each on its own backend
// with its shard of the weights, its own KV pages and recurrent-state slots,
// run together on one batch. The collectives keep the residual stream equal
// on every rank: q/k/v, gate/up and the Gated DeltaNet input projections are
// column-parallel (a rank computes its heads or columns), the o, down and
// out projections row-parallel (a partial sum on every rank, completed by
// AllReduce), the embedding and lm head vocabulary-parallel (AllReduce of
// the rows each rank holds; AllGatherCols of the logits). Routed experts on
// the CPU expert engine run once per MoE layer on rank 0, which hands the
// result to every rank (Broadcast, or with a shared expert AllReduce).
//
// Implementations: Local (ranks as goroutines of one process over CPU
// backend tensors, an in-process all-reduce), and in backend/cuda the NCCL
// communicator (one GPU per rank) and the same-device one (several ranks on
// one GPU, for tests).
package tp

import (
	"errors"
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/modelconfig"
)

// Comm is one rank's end of a communicator. Its collectives are ops like
// backend.Ops': every rank calls the same collectives in the same order
// with tensors of the same shapes, they are queued after the rank's earlier
// ops (on the rank's stream on a GPU; at once on the CPU), and a failure is
// sticky until Err returns it.
type Comm interface {
	// Rank is this rank's index in [0, Size).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// AllReduce sums the first n rows of x over the ranks, in place on
	// every rank; every rank's sum is the same (ranks added in order).
	AllReduce(x backend.Tensor, n int)
	// Broadcast copies rank 0's first n rows of x into every rank's x.
	Broadcast(x backend.Tensor, n int)
	// AllGatherCols writes, on every rank, the ranks' x [rows, w_rank]
	// side by side in rank order into the first n rows of out [rows, W]:
	// rank r's x is GatherWidths(W, Size)[r] wide (the vocabulary split
	// of the logits).
	AllGatherCols(out, x backend.Tensor, n int)
	// Err returns the first failure since the last call and clears it.
	Err() error
}

// Group is the communicators of one tensor-parallel model's ranks.
type Group interface {
	// Size is the number of ranks.
	Size() int
	// Comm is rank's communicator.
	Comm(rank int) Comm
	// Abort fails, with err, every collective a rank waits in or enters
	// until Reset: a rank whose step failed midway calls it so that the
	// others do not wait for it forever.
	Abort(err error)
	// Reset ends an Abort once every rank has returned from the step.
	Reset()
	// Close releases the communicators.
	Close() error
}

// Size is the rank count of c: 1 for a nil Comm (no tensor parallelism).
func Size(c Comm) int {
	if c == nil {
		return 1
	}
	return c.Size()
}

// Rank is c's rank: 0 for a nil Comm.
func Rank(c Comm) int {
	if c == nil {
		return 0
	}
	return c.Rank()
}

// Span is a range of rows, heads or columns: [First, First+Count).
type Span struct{ First, Count int }

// Scale returns the span of units of width w each: [First·w, (First+Count)·w).
func (s Span) Scale(w int) Span { return Span{s.First * w, s.Count * w} }

// Part returns s as a row part for backend.GatherRows.
func (s Span) Part() [2]int { return [2]int{s.First, s.Count} }

// Layout is the partitioning arithmetic of rank Rank of Size ranks.
type Layout struct{ Rank, Size int }

// LayoutOf is c's layout (rank 0 of 1 for a nil Comm).
func LayoutOf(c Comm) Layout { return Layout{Rank: Rank(c), Size: Size(c)} }

// Split returns this rank's equal share of n units (n divisible by Size;
// Check first).
func (l Layout) Split(n int) Span {
	per := n / l.Size
	return Span{l.Rank * per, per}
}

// Divides checks that n units of what split evenly over the ranks.
func (l Layout) Divides(what string, n int) error {
	if n%l.Size != 0 {
		return fmt.Errorf("%s: %d does not divide over tensor-parallel size %d", what, n, l.Size)
	}
	return nil
}

// KVHeads returns the kv heads this rank holds of kv, for heads query
// heads: its equal share when there are at least as many kv heads as
// ranks; else one kv head, replicated over Size/kv ranks (the one its
// query heads read), as SGLang does.
func (l Layout) KVHeads(heads, kv int) Span {
	if kv >= l.Size {
		return l.Split(kv)
	}
	return Span{l.Rank / (l.Size / kv), 1}
}

// CheckAttention refuses attention of heads query heads over kv kv heads
// that does not split: heads must divide over the ranks, and kv heads too,
// or the ranks over the kv heads (each then replicated).
func (l Layout) CheckAttention(heads, kv int) error {
	if err := l.Divides("num_attention_heads", heads); err != nil {
		return err
	}
	switch {
	case kv >= l.Size && kv%l.Size != 0:
		return fmt.Errorf("num_key_value_heads: %d does not divide over tensor-parallel size %d", kv, l.Size)
	case kv < l.Size && l.Size%kv != 0:
		return fmt.Errorf("num_key_value_heads: tensor-parallel size %d is not a multiple of the %d kv heads (each would be replicated unevenly)", l.Size, kv)
	}
	return nil
}

// Vocab returns this rank's rows of a vocabulary of v tokens: ceil(v/Size)
// per rank, the last rank the rest.
func (l Layout) Vocab(v int) Span {
	per := (v + l.Size - 1) / l.Size
	first := min(l.Rank*per, v)
	return Span{first, min(per, v-first)}
}

// GatherWidths is the width of each of size ranks' share of W columns
// (Layout.Vocab): AllGatherCols' layout.
func GatherWidths(w, size int) []int {
	ws := make([]int, size)
	for r := range ws {
		ws[r] = Layout{Rank: r, Size: size}.Vocab(w).Count
	}
	return ws
}

// CheckVocab refuses a vocabulary too small to give every rank rows.
func (l Layout) CheckVocab(v int) error {
	last := Layout{Rank: l.Size - 1, Size: l.Size}
	if last.Vocab(v).Count <= 0 {
		return fmt.Errorf("vocab_size: %d rows do not give each of %d ranks a share", v, l.Size)
	}
	return nil
}

// CheckModel refuses, all at once and named by field, a model of config c
// whose widths do not split over size ranks as SGLang splits them:
// attention heads (kv heads divide or are replicated), Gated DeltaNet key
// and value heads, the dense MLP and shared expert widths, the vocabulary.
func CheckModel(c *modelconfig.Config, size int) error {
	if size <= 1 {
		return nil
	}
	l := Layout{Size: size}
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.NumLayers > c.NumLinearLayers() {
		add(l.CheckAttention(c.NumHeads, c.NumKVHeads))
	}
	if c.NumLinearLayers() > 0 {
		add(l.Divides("linear_num_key_heads", c.Linear.NumKeyHeads))
		add(l.Divides("linear_num_value_heads", c.Linear.NumValueHeads))
	}
	if c.NumMoELayers() < c.NumLayers {
		add(l.Divides("intermediate_size", c.IntermediateSize))
	}
	if c.NumMoELayers() > 0 && c.SharedExpertIntermediateSize > 0 {
		add(l.Divides("shared_expert_intermediate_size", c.SharedExpertIntermediateSize))
	}
	if c.NumMoELayers() > 0 && c.SharedExperts > 0 { // DeepSeek-V3's shared experts: one MLP
		add(l.Divides("n_shared_experts × moe_intermediate_size", c.SharedExperts*c.MoEIntermediateSize))
	}
	add(l.CheckVocab(c.VocabSize))
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("tensor-parallel size %d: %w", l.Size, errors.Join(errs...))
}
