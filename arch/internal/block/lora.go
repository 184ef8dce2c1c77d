package block

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ktserve/kt/arch/runbase"
	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/lora"
	"github.com/ktserve/kt/tensor"
)

// LoRA is the adapter deltas of one linear module: out += Σ s·B(A x) over
// the adapters that have the module, each on the rows of its requests.
// The zero value (no adapter has the module) does nothing.
type LoRA struct {
	terms []loraTerm
}

type loraTerm struct {
	a, b     backend.Tensor // [r, in], [out, r] as F32
	mid, d   backend.Tensor // scratch [T, r], [T, out]
	scale    float32
	id       int
	rank, wd int
}

// LoRAs binds adapters to a model's modules and holds the scratch their
// deltas use (one [T, r] and one [T, width] buffer per distinct shape).
type LoRAs struct {
	rb     *runbase.Base
	la     backend.LoRAOps
	bounds []lora.Bound
	mids   map[int]backend.Tensor
	ds     map[int]backend.Tensor
	// Modules counts the modules bound (for logs and tests).
	Modules int
}

// NewLoRAs prepares the non-expert adapters of rb.Opts.LoRA; it returns
// nil when there are none. The backend must implement backend.LoRAOps.
func NewLoRAs(rb *runbase.Base) (*LoRAs, error) {
	b := rb.Opts.LoRA.NonExpert()
	if len(b) == 0 {
		return nil, nil
	}
	la, ok := rb.BE.(backend.LoRAOps)
	if !ok {
		return nil, fmt.Errorf("backend %s has no LoRA ops", rb.BE.Name())
	}
	return &LoRAs{rb: rb, la: la, bounds: b, mids: map[int]backend.Tensor{}, ds: map[int]backend.Tensor{}}, nil
}

// Bind returns the LoRA of module (e.g. "self_attn.q_proj") of layer with
// checkpoint shape [outFull, inFull], as the model holds the module's
// weight (split, runbase.Split): only the rows split keeps of the output
// (B's rows: a column-parallel weight, or Qwen3.5's q_proj split into query
// and gate halves) or only its columns of the input (A's columns: a
// row-parallel weight, whose delta is then a partial sum like the
// product's). Nil receiver: no adapters, a zero LoRA.
func (s *LoRAs) Bind(layer int, module string, outFull, inFull int, split runbase.Split) (LoRA, error) {
	var l LoRA
	if s == nil {
		return l, nil
	}
	for _, bd := range s.bounds {
		p, err := bd.Adapter.Module(layer, module, outFull, inFull)
		if err != nil {
			return LoRA{}, err
		}
		if p == nil {
			continue
		}
		r := bd.Adapter.Rank
		bRows, out := p.B.Data, outFull
		if split.Rows != nil {
			bRows, out = nil, 0
			for _, sp := range split.Rows {
				bRows = append(bRows, p.B.Data[sp.First*r:(sp.First+sp.Count)*r]...)
				out += sp.Count
			}
		}
		aCols, in := p.A.Data, inFull
		if c := split.Cols; c.Count > 0 {
			aCols, in = make([]float32, 0, r*c.Count), c.Count
			for i := range r {
				aCols = append(aCols, p.A.Data[i*inFull+c.First:i*inFull+c.First+c.Count]...)
			}
		}
		a, err := s.weight(p.A.Name, aCols, r, in)
		if err != nil {
			return LoRA{}, err
		}
		b, err := s.weight(p.B.Name, bRows, out, r)
		if err != nil {
			return LoRA{}, err
		}
		mid, err := s.scratch(s.mids, r)
		if err != nil {
			return LoRA{}, err
		}
		d, err := s.scratch(s.ds, out)
		if err != nil {
			return LoRA{}, err
		}
		l.terms = append(l.terms, loraTerm{a: a, b: b, mid: mid, d: d, scale: bd.Adapter.Scale, id: bd.ID, rank: r, wd: out})
		s.Modules++
	}
	return l, nil
}

func (s *LoRAs) weight(name string, v []float32, rows, cols int) (backend.Tensor, error) {
	data := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
	}
	return s.rb.BE.Weight(backend.Host{Name: name, DType: tensor.F32, Shape: []int{rows, cols}, Data: data})
}

func (s *LoRAs) scratch(m map[int]backend.Tensor, width int) (backend.Tensor, error) {
	if t, ok := m[width]; ok {
		return t, nil
	}
	t, err := s.rb.BE.Alloc(s.rb.BE.ActDType(), s.rb.Opts.MaxBatchTokens, width)
	if err != nil {
		return nil, fmt.Errorf("allocating LoRA scratch: %w", err)
	}
	m[width] = t
	return t, nil
}

// Unused reports adapter modules no Bind took.
func (s *LoRAs) Unused() error {
	if s == nil {
		return nil
	}
	for _, bd := range s.bounds {
		if err := bd.Adapter.Unused(); err != nil {
			return err
		}
	}
	return nil
}

// Apply adds the module's deltas on x (the module's input, n rows) to out
// (its output), each adapter on its rows; adapters no sequence of the step
// asked for are skipped.
func (s *LoRAs) Apply(l *LoRA, out, x backend.Tensor, n int) {
	if s == nil || len(l.terms) == 0 {
		return
	}
	be := s.rb.BE
	for i := range l.terms {
		t := &l.terms[i]
		if !backend.StepHasAdapter(&s.rb.Step, t.id) {
			continue
		}
		be.MatMul(t.mid, x, t.a, n)
		be.MatMul(t.d, t.mid, t.b, n)
		s.la.LoRAAdd(out, t.d, t.scale, t.id, n)
	}
}
