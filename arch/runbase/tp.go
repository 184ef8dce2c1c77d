package runbase

import (
	"errors"
	"fmt"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/modelconfig"
	"github.com/ktserve/kt/tp"
)

// Tensor parallelism on the runner's side (package tp): a runner loaded
// with Options.TP is one rank. Its weights are sharded here, at load, in
// one place: a family names, per matrix, the rows (column-parallel) or the
// columns (row-parallel) its rank holds (Split), and runbase fetches that
// part of the checkpoint. The embedding and lm head are vocabulary-parallel
// (Embedding, LMHead, Embed, and the logits gathered in queueHead); the
// family calls AllReduce after each row-parallel product and, on MoE
// layers, lets rank 0 compute the routed experts (Root) and hand them over.

// Split says which part of a checkpoint matrix a rank holds: the whole
// (the zero value), row spans in order (a column-parallel weight), or one
// column span (a row-parallel weight).
type Split struct {
	Rows []tp.Span
	Cols tp.Span // Count 0: every column
}

// RowSplit is the split holding rows spans of a matrix.
func RowSplit(spans ...tp.Span) Split { return Split{Rows: spans} }

// ColSplit is the split holding columns span of a matrix.
func ColSplit(span tp.Span) Split { return Split{Cols: span} }

// Layout is the runner's rank and rank count (rank 0 of 1 without tensor
// parallelism).
func (b *Base) Layout() tp.Layout { return tp.LayoutOf(b.TP) }

// Root reports whether the runner is rank 0 (always, without tensor
// parallelism): the rank that computes the routed experts and whose logits
// are read.
func (b *Base) Root() bool { return tp.Rank(b.TP) == 0 }

// Parallel reports whether the runner is one rank of several.
func (b *Base) Parallel() bool { return tp.Size(b.TP) > 1 }

// HostSplit fetches the part s of the checkpoint matrix name of the given
// (whole) shape, as Host does: a view of the mapped bytes when it is
// the whole matrix or one row span, else a copy (an FP8 matrix's block
// scales along, see backend.GatherRows and backend.GatherCols).
func (b *Base) HostSplit(name string, s Split, shape ...int) (backend.Host, error) {
	h, err := b.Host(name, shape...)
	if err != nil {
		return backend.Host{}, err
	}
	return SplitHost(h, s)
}

// SplitHost returns the part s of the 2-D (or 1-D, as rows of one
// element) weight h.
func SplitHost(h backend.Host, s Split) (backend.Host, error) {
	if len(s.Rows) == 0 && s.Cols.Count == 0 {
		return h, nil
	}
	if len(h.Shape) == 1 { // a vector: rows of one element
		v := h
		v.Shape = []int{h.Shape[0], 1}
		p, err := SplitHost(v, s)
		if err != nil {
			return backend.Host{}, err
		}
		p.Shape = []int{p.Shape[0]}
		return p, nil
	}
	if len(h.Shape) != 2 {
		return backend.Host{}, fmt.Errorf("tensor %s: splitting a %d-D tensor", h.Name, len(h.Shape))
	}
	if s.Cols.Count > 0 {
		if s.Cols.First == 0 && s.Cols.Count == h.Shape[1] {
			return h, nil
		}
		return backend.GatherCols(h, fmt.Sprintf("%s[:, %d:%d]", h.Name, s.Cols.First, s.Cols.First+s.Cols.Count), s.Cols.First, s.Cols.Count)
	}
	rows := merge(s.Rows)
	if len(rows) == 1 {
		r := rows[0]
		if r.First == 0 && r.Count == h.Shape[0] {
			return h, nil
		}
		return backend.ExpertRows(h, fmt.Sprintf("%s[%d:%d]", h.Name, r.First, r.First+r.Count), 0, r.First, r.Count)
	}
	parts := make([][2]int, len(rows))
	for i, r := range rows {
		parts[i] = r.Part()
	}
	return backend.GatherRows(h, h.Name+"[rank rows]", parts)
}

// merge joins adjacent spans (one rank's rows of a whole matrix: one span).
func merge(spans []tp.Span) []tp.Span {
	var out []tp.Span
	for _, r := range spans {
		if n := len(out); n > 0 && out[n-1].First+out[n-1].Count == r.First {
			out[n-1].Count += r.Count
			continue
		}
		out = append(out, r)
	}
	return out
}

// WeightSplit fetches the part s of a checkpoint matrix (HostSplit) and
// hands it to the backend.
func (b *Base) WeightSplit(name string, s Split, shape ...int) (backend.Tensor, error) {
	h, err := b.HostSplit(name, s, shape...)
	if err != nil {
		return nil, err
	}
	return b.BE.Weight(h)
}

// ColumnParallel is the split of a column-parallel matrix of rows rows:
// this rank's equal share of them.
func (b *Base) ColumnParallel(rows int) Split { return RowSplit(b.Layout().Split(rows)) }

// RowParallel is the split of a row-parallel matrix of cols columns: this
// rank's equal share of them.
func (b *Base) RowParallel(cols int) Split { return ColSplit(b.Layout().Split(cols)) }

// Embedding fetches the embedding table name [vocab, hidden]: this rank's
// vocabulary rows (tp.Layout.Vocab).
func (b *Base) Embedding(name string, vocab, hidden int) (backend.Tensor, error) {
	b.vocab = b.Layout().Vocab(vocab)
	return b.WeightSplit(name, RowSplit(b.vocab), vocab, hidden)
}

// Embed queues the embedding lookup of the step's tokens into out with the
// table Embedding returned: with tensor parallelism each rank looks up
// the rows it holds (zero rows for the others) and the ranks' rows are
// summed.
func (b *Base) Embed(out, table backend.Tensor) {
	if !b.Parallel() {
		b.BE.Embed(out, table)
		return
	}
	b.BE.(backend.VocabEmbedder).EmbedVocab(out, table, b.vocab.First)
	b.TP.AllReduce(out, len(b.Step.Tokens))
}

// AllReduce sums the first n rows of x over the ranks (the output of a
// row-parallel product); nothing without tensor parallelism.
func (b *Base) AllReduce(x backend.Tensor, n int) {
	if b.Parallel() {
		b.TP.AllReduce(x, n)
	}
}

// Broadcast copies rank 0's first n rows of x to every rank (the routed
// experts' output); nothing without tensor parallelism.
func (b *Base) Broadcast(x backend.Tensor, n int) {
	if b.Parallel() {
		b.TP.Broadcast(x, n)
	}
}

// checkTP refuses, at Open, what a rank cannot run: a backend without the
// vocabulary-shard lookup, and model widths that do not divide
// (tp.CheckModel).
func (b *Base) checkTP(c *modelconfig.Config) error {
	if !b.Parallel() {
		return nil
	}
	var errs []error
	if _, ok := b.BE.(backend.VocabEmbedder); !ok {
		errs = append(errs, fmt.Errorf("backend %s has no vocabulary-parallel embedding lookup", b.BE.Name()))
	}
	if err := tp.CheckModel(c, b.Layout().Size); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
