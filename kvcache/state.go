package kvcache

import (
	"fmt"
	"math"
)

// StateChunk is the number of tokens per chunk of the chunked gated delta
// rule; a sequence's state keeps the rows of its open chunk.
const StateChunk = 64

// StateShape sizes the per-sequence state of a model's linear-attention
// (Gated DeltaNet) layers: a causal-conv history and a recurrent state per
// layer.
type StateShape struct {
	Layers       int // linear-attention layers
	ConvChannels int // conv1d channels (2·key dim + value dim)
	ConvKernel   int // conv1d kernel width
	KHeads       int // key heads
	VHeads       int // value heads
	KDim, VDim   int // per-head key and value widths
}

func (s StateShape) validate() error {
	if s.Layers < 0 || s.ConvChannels <= 0 || s.ConvKernel < 1 || s.KHeads <= 0 || s.VHeads <= 0 || s.KDim <= 0 || s.VDim <= 0 {
		return fmt.Errorf("linear state: bad shape %+v", s)
	}
	return nil
}

// per-layer lengths of the state's parts, in float32s.
func (s StateShape) convLen() int { return (s.ConvKernel - 1) * s.ConvChannels }
func (s StateShape) sLen() int    { return s.VHeads * s.KDim * s.VDim }
func (s StateShape) kLen() int    { return StateChunk * s.KHeads * s.KDim }
func (s StateShape) vLen() int    { return StateChunk * s.VHeads * s.VDim }
func (s StateShape) gLen() int    { return StateChunk * s.VHeads }
func (s StateShape) layerLen() int {
	return s.convLen() + s.sLen() + s.kLen() + s.vLen() + s.gLen()
}

// BytesPerSeq is the memory one sequence's state takes.
func (s StateShape) BytesPerSeq() int64 { return int64(s.Layers) * int64(s.layerLen()) * 4 }

// LayerState is one sequence's state for one linear-attention layer; the
// slices alias the sequence's buffer.
type LayerState struct {
	Conv []float32 // previous ConvKernel-1 conv inputs, [ConvKernel-1, ConvChannels], oldest first
	S    []float32 // recurrent state at the open chunk's start, [VHeads, KDim, VDim]
	K    []float32 // open chunk keys, [StateChunk, KHeads, KDim]
	V    []float32 // open chunk corrected values, [StateChunk, VHeads, VDim]
	G    []float32 // open chunk cumulative log decay, [StateChunk, VHeads]
}

// SeqState is one sequence's linear-attention state across layers.
type SeqState struct {
	// Len is the number of tokens the state has consumed; the open chunk
	// holds Len % StateChunk rows.
	Len    int
	Layers []LayerState
	buf    []float32
}

// OpenRows is the number of filled rows of the open chunk.
func (s *SeqState) OpenRows() int { return s.Len % StateChunk }

// StateStore holds the linear-attention state of up to maxSeqs sequences,
// one per engine slot. A slot's memory is taken on first use and returned
// to a free list (zeroed) when the slot is freed, so at most maxSeqs
// sequences' worth is ever allocated.
type StateStore struct {
	shape StateShape
	slots []*SeqState
	free  []*SeqState
	total int // states allocated, in use or free
}

// NewStateStore makes a store for slots 0..maxSeqs-1. It refuses a
// configuration whose full size would overflow.
func NewStateStore(shape StateShape, maxSeqs int) (*StateStore, error) {
	if err := shape.validate(); err != nil {
		return nil, err
	}
	if maxSeqs <= 0 {
		return nil, fmt.Errorf("linear state: max running requests must be positive, got %d", maxSeqs)
	}
	per := shape.BytesPerSeq()
	if per > 0 && int64(maxSeqs) > math.MaxInt64/per {
		return nil, fmt.Errorf("linear state: %d sequences of %d bytes overflow", maxSeqs, per)
	}
	return &StateStore{shape: shape, slots: make([]*SeqState, maxSeqs)}, nil
}

// Shape returns the store's per-sequence shape.
func (s *StateStore) Shape() StateShape { return s.shape }

// MaxSeqs is the number of slots.
func (s *StateStore) MaxSeqs() int { return len(s.slots) }

// InUse counts slots holding a state.
func (s *StateStore) InUse() int { return s.total - len(s.free) }

// Allocated counts states allocated so far (in use or on the free list).
func (s *StateStore) Allocated() int { return s.total }

// Get returns the slot's state, taking a zeroed one if the slot has none.
func (s *StateStore) Get(slot int) (*SeqState, error) {
	if slot < 0 || slot >= len(s.slots) {
		return nil, fmt.Errorf("linear state: slot %d out of range 0..%d", slot, len(s.slots)-1)
	}
	if st := s.slots[slot]; st != nil {
		return st, nil
	}
	var st *SeqState
	if n := len(s.free); n > 0 {
		st, s.free = s.free[n-1], s.free[:n-1]
	} else {
		st = s.newState()
		s.total++
	}
	s.slots[slot] = st
	return st, nil
}

// Peek returns the slot's state, or nil when it holds none.
func (s *StateStore) Peek(slot int) *SeqState {
	if slot < 0 || slot >= len(s.slots) {
		return nil
	}
	return s.slots[slot]
}

// Free releases the slot's state (zeroed, to the free list); freeing an
// empty or out-of-range slot does nothing.
func (s *StateStore) Free(slot int) {
	if slot < 0 || slot >= len(s.slots) || s.slots[slot] == nil {
		return
	}
	st := s.slots[slot]
	s.slots[slot] = nil
	clear(st.buf)
	st.Len = 0
	s.free = append(s.free, st)
}

func (s *StateStore) newState() *SeqState {
	sh := s.shape
	st := &SeqState{buf: make([]float32, sh.Layers*sh.layerLen()), Layers: make([]LayerState, sh.Layers)}
	b := st.buf
	take := func(n int) []float32 {
		x := b[:n:n]
		b = b[n:]
		return x
	}
	for l := range st.Layers {
		st.Layers[l] = LayerState{Conv: take(sh.convLen()), S: take(sh.sLen()), K: take(sh.kLen()), V: take(sh.vLen()), G: take(sh.gLen())}
	}
	return st
}

// Copy makes slot dst's state a copy of slot src's (zero when src holds
// none), taking memory for dst if it has none.
func (s *StateStore) Copy(dst, src int) error {
	if src < 0 || src >= len(s.slots) {
		return fmt.Errorf("linear state: copy from slot %d out of range 0..%d", src, len(s.slots)-1)
	}
	if dst == src {
		return nil
	}
	d, err := s.Get(dst)
	if err != nil {
		return err
	}
	if from := s.slots[src]; from != nil {
		copy(d.buf, from.buf)
		d.Len = from.Len
	} else {
		clear(d.buf)
		d.Len = 0
	}
	return nil
}
