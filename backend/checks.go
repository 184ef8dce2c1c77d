package backend

import (
	"fmt"

	"github.com/ktserve/kt/tensor"
)

// The Check functions are the argument checks every backend makes before
// running an op: the op set's contract, written once. They take plain
// values (a tensor's label, dtype, shape or element count), so each backend
// calls them with what its own tensor type holds; the error names the op and
// the offending argument, and the backend records it (prefixed with its
// name) for Sync. Checks a backend needs for its own kernels only (a GPU
// kernel's largest head size, say) stay in that backend.

// Arg describes a tensor argument to the checks: what every backend's
// tensor type knows about itself. Build it only for a check (it is a small
// value; nothing is formatted unless the check fails).
type Arg struct {
	Name  string // the weight's name; empty for activations
	DType tensor.DType
	Shape []int
	Len   int // elements
	// Block is a block-scaled FP8 weight's [bn, bk] (zero otherwise).
	Block [2]int
}

// Label names the tensor in messages: its name, else dtype and shape.
func (a Arg) Label() string {
	if a.Name != "" {
		return a.Name
	}
	return fmt.Sprintf("%s%v", a.DType, a.Shape)
}

// Cols is the size of the last dimension (1 for a scalar).
func (a Arg) Cols() int {
	if len(a.Shape) == 0 {
		return 1
	}
	return a.Shape[len(a.Shape)-1]
}

// IsFloat reports whether dt is a float type a weight may have (F32, BF16
// or F16).
func IsFloat(dt tensor.DType) bool {
	return dt == tensor.F32 || dt == tensor.BF16 || dt == tensor.F16
}

// CheckF32 checks that the activation what is F32 with at least need
// elements.
func CheckF32(what string, a Arg, need int) error {
	if a.DType != tensor.F32 {
		return fmt.Errorf("%s: %s is %s, want F32", what, a.Label(), a.DType)
	}
	if need > a.Len {
		return fmt.Errorf("%s: %s has %d elements, need %d", what, a.Label(), a.Len, need)
	}
	return nil
}

// CheckMatrix checks that op's weight argument what is a 2-D float
// tensor: Embed's table, MatMul's weight.
func CheckMatrix(op, what string, w Arg) error {
	if len(w.Shape) != 2 || !IsFloat(w.DType) {
		return fmt.Errorf("%s: %s %s must be a 2-D float tensor", op, what, w.Label())
	}
	return nil
}

// CheckMatMulWeight checks MatMul's weight: a 2-D float tensor, or a 2-D
// block-scaled FP8 tensor (F8_E4M3 with its block shape set).
func CheckMatMulWeight(w Arg) error {
	if w.DType == tensor.F8E4M3 && len(w.Shape) == 2 && w.Block[0] > 0 && w.Block[1] > 0 {
		return nil
	}
	if w.DType == tensor.F8E4M3 {
		return fmt.Errorf("MatMul: weight %s is F8_E4M3 without block scales", w.Label())
	}
	return CheckMatrix("MatMul", "weight", w)
}

// FP8ScaleShape is the shape of the block scales of an [o, k] FP8 weight
// with blocks [bn, bk]: [ceil(o/bn), ceil(k/bk)].
func FP8ScaleShape(o, k int, block [2]int) [2]int {
	return [2]int{(o + block[0] - 1) / block[0], (k + block[1] - 1) / block[1]}
}

// CheckFP8 checks a block-scaled FP8 weight handed to Backend.Weight: a
// 2-D F8_E4M3 tensor, positive block sizes, and a Scale of F32, BF16 or
// F16 with shape [ceil(O/bn), ceil(K/bk)] (a 1-D scale of that many
// elements is accepted too) whose data length matches. The errors name the
// tensor and its scale.
func CheckFP8(h Host) error {
	if h.DType != tensor.F8E4M3 {
		return fmt.Errorf("tensor %s: block scales given for a %s tensor, want F8_E4M3", h.Name, h.DType)
	}
	if len(h.Shape) != 2 || h.Shape[0] <= 0 || h.Shape[1] <= 0 {
		return fmt.Errorf("tensor %s: F8_E4M3 weight has shape %v, want 2-D [out, in]", h.Name, h.Shape)
	}
	if h.Scale == nil {
		return fmt.Errorf("tensor %s: F8_E4M3 weight without block scales (weight_scale_inv)", h.Name)
	}
	bn, bk := h.Block[0], h.Block[1]
	if bn <= 0 || bk <= 0 {
		return fmt.Errorf("tensor %s: FP8 block size %v, want two positive sizes (weight_block_size)", h.Name, h.Block)
	}
	sc := h.Scale
	if !IsFloat(sc.DType) {
		return fmt.Errorf("tensor %s: scale %s is %s, want F32, BF16 or F16", h.Name, sc.Name, sc.DType)
	}
	want := FP8ScaleShape(h.Shape[0], h.Shape[1], h.Block)
	n := 1
	for _, d := range sc.Shape {
		n *= d
	}
	if !(len(sc.Shape) == 2 && sc.Shape[0] == want[0] && sc.Shape[1] == want[1]) && !(len(sc.Shape) == 1 && n == want[0]*want[1]) {
		return fmt.Errorf("tensor %s: scale %s has shape %v, want %v for weight %v in blocks %v", h.Name, sc.Name, sc.Shape, want, h.Shape, h.Block)
	}
	if err := sc.checkSize(); err != nil {
		return err
	}
	return nil
}

// CheckTokens checks that every token id of a step lies in a vocabulary of
// vocab rows (Embed).
func CheckTokens(tokens []int32, vocab int) error {
	for _, id := range tokens {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("Embed: token id %d outside vocabulary [0,%d)", id, vocab)
		}
	}
	return nil
}

// CheckMatMul checks MatMul's activation widths against its 2-D weight w
// [o, k] (see CheckMatrix): x is xCols wide, out is outCols wide.
func CheckMatMul(xCols, outCols int, w Arg) error {
	if o, k := w.Shape[0], w.Shape[1]; xCols != k || outCols != o {
		return fmt.Errorf("MatMul: x width %d, out width %d do not match weight %s [%d,%d]", xCols, outCols, w.Label(), o, k)
	}
	return nil
}

// CheckNormWeight checks op's norm weight: a non-empty float tensor
// (RMSNorm).
func CheckNormWeight(op string, w Arg) error {
	if !IsFloat(w.DType) || w.Len == 0 {
		return fmt.Errorf("%s: weight %s is %s", op, w.Label(), w.DType)
	}
	return nil
}

// CheckRope checks a rotary configuration and Rope's row count n against
// the step's stepRows rows.
func CheckRope(r *Rope, n, stepRows int) error {
	if r.RotaryDim <= 0 || r.RotaryDim%2 != 0 || r.RotaryDim > r.HeadDim {
		return fmt.Errorf("Rope: rotary dim %d invalid for head dim %d", r.RotaryDim, r.HeadDim)
	}
	if n > stepRows {
		return fmt.Errorf("Rope: %d rows but the step has %d", n, stepRows)
	}
	return nil
}

// CheckAttention checks Attention's head layout against the cache kv and
// its row count n against the step's stepTokens tokens.
func CheckAttention(p *Attn, kv *KVCache, n, stepTokens int) error {
	if p.Heads <= 0 || p.KVHeads <= 0 || p.Heads%p.KVHeads != 0 || p.HeadDim != kv.HeadDim || p.KVHeads != kv.KVHeads {
		return fmt.Errorf("Attention: %d heads, %d kv heads, head dim %d do not fit the cache (%d kv heads x %d)", p.Heads, p.KVHeads, p.HeadDim, kv.KVHeads, kv.HeadDim)
	}
	if n != stepTokens {
		return fmt.Errorf("Attention: %d rows but the step has %d tokens", n, stepTokens)
	}
	return nil
}

// CheckKVPages checks that every sequence of a step has the pages of kv its
// positions 0..Pos+Len-1 need, each inside the cache (the attention kernels
// index pages without bounds checks).
func CheckKVPages(seqs []Seq, kv *KVCache) error {
	ps := kv.PageSize
	if ps <= 0 {
		return fmt.Errorf("Attention: page size %d", ps)
	}
	for _, sq := range seqs {
		need := (sq.Pos + sq.Len + ps - 1) / ps
		if len(sq.Pages) < need {
			return fmt.Errorf("Attention: slot %d has %d KV pages, needs %d", sq.Slot, len(sq.Pages), need)
		}
		for _, pg := range sq.Pages[:need] {
			if pg < 0 || int(pg) >= kv.TotalPages {
				return fmt.Errorf("Attention: slot %d uses KV page %d outside [0,%d)", sq.Slot, pg, kv.TotalPages)
			}
		}
	}
	return nil
}

// CheckTopK checks RouterTopK's k against the router's experts columns.
func CheckTopK(k, experts int) error {
	if k < 1 || k > experts {
		return fmt.Errorf("RouterTopK: top-k %d with %d experts", k, experts)
	}
	return nil
}

// CheckRouterIDs checks RouterTopK's ids output: I32 with room for need
// ids.
func CheckRouterIDs(ids Arg, need int) error {
	if ids.DType != tensor.I32 || ids.Len < need {
		return fmt.Errorf("RouterTopK: ids %s must be I32 with %d elements", ids.Label(), need)
	}
	return nil
}

// CheckExperts checks that e has as many up and down as gate weights, and
// at least one expert.
func CheckExperts(e *Experts) error {
	ne := len(e.Gate)
	if ne == 0 || len(e.Up) != ne || len(e.Down) != ne {
		return fmt.Errorf("MoE: %d/%d/%d gate/up/down experts", len(e.Gate), len(e.Up), len(e.Down))
	}
	return nil
}

// CheckExpertWeight checks one projection w of expert ex: a float tensor
// (or a block-scaled FP8 one, where the backend's MoE takes them) of
// hidden x inter elements.
func CheckExpertWeight(ex int, w Arg, hidden, inter int) error {
	fp8 := w.DType == tensor.F8E4M3 && w.Block[0] > 0 && w.Block[1] > 0
	if !(IsFloat(w.DType) || fp8) || w.Len != hidden*inter {
		return fmt.Errorf("MoE: expert %d weight %s does not match hidden %d inter %d", ex, w.Label(), hidden, inter)
	}
	return nil
}

// CheckExpertIDs checks MoE's ids: I32, holding n rows of k ids.
func CheckExpertIDs(ids Arg, n, k int) error {
	if ids.DType != tensor.I32 {
		return fmt.Errorf("MoE: ids %s must be I32", ids.Label())
	}
	if ids.Len < n*k {
		return fmt.Errorf("MoE: ids %s hold fewer than %d x %d", ids.Label(), n, k)
	}
	return nil
}

// CheckGather checks GatherRows' range [first, first+count) against the
// step's outRows output rows.
func CheckGather(first, count, outRows int) error {
	if first < 0 || count < 0 || first+count > outRows {
		return fmt.Errorf("GatherRows: rows [%d,%d) outside the step's %d output rows", first, first+count, outRows)
	}
	return nil
}

// CheckRead checks that Read's destination of have floats holds need.
func CheckRead(have, need int) error {
	if have < need {
		return fmt.Errorf("Read: destination holds %d floats, need %d", have, need)
	}
	return nil
}

// CheckStepRows checks that each of the step's sequences spans rows inside
// its tokens and records in rowSeq (at least as long as the step) which
// sequence each row belongs to; SetStep's part that the ops' row-to-sequence
// lookups rely on.
func CheckStepRows(s *Step, rowSeq []int32) error {
	for i, q := range s.Seqs {
		if q.Start < 0 || q.Len < 1 || q.Start+q.Len > len(s.Tokens) {
			return fmt.Errorf("step sequence %d spans rows [%d,%d) outside %d tokens", i, q.Start, q.Start+q.Len, len(s.Tokens))
		}
		for r := q.Start; r < q.Start+q.Len; r++ {
			rowSeq[r] = int32(i)
		}
	}
	return nil
}

// CheckSpans checks that the step's sequences lie within the first n rows
// that op works on (the linear-attention sequence ops).
func CheckSpans(op string, seqs []Seq, n int) error {
	for i, q := range seqs {
		if q.Start+q.Len > n {
			return fmt.Errorf("%s: step sequence %d spans rows [%d,%d) beyond %d", op, i, q.Start, q.Start+q.Len, n)
		}
	}
	return nil
}

// CheckLayer checks op's linear-attention layer index against the
// state's layers.
func CheckLayer(op string, layer, layers int) error {
	if layer < 0 || layer >= layers {
		return fmt.Errorf("%s: layer %d outside [0,%d)", op, layer, layers)
	}
	return nil
}

// CheckWidth checks that op's argument what is want columns wide.
func CheckWidth(op, what string, have, want int) error {
	if have != want {
		return fmt.Errorf("%s: %s width %d, want %d", op, what, have, want)
	}
	return nil
}

// CheckDeltaGates checks DeltaGates' per-head weights A_log and dt_bias:
// float vectors of one length.
func CheckDeltaGates(aLog, dtBias Arg) error {
	if aLog.Len != dtBias.Len || !IsFloat(aLog.DType) || !IsFloat(dtBias.DType) {
		return fmt.Errorf("DeltaGates: A_log %s and dt_bias %s must be float vectors of one length", aLog.Label(), dtBias.Label())
	}
	return nil
}

// CheckGateWidth checks SigmoidGate's gate width against x's: equal, or
// one column.
func CheckGateWidth(gate, x int) error {
	if gate != x && gate != 1 {
		return fmt.Errorf("SigmoidGate: gate width %d must be 1 or x's width %d", gate, x)
	}
	return nil
}

// CheckFloatWeight checks the weight what: a float tensor of at least need
// elements.
func CheckFloatWeight(what string, w Arg, need int) error {
	if !IsFloat(w.DType) {
		return fmt.Errorf("%s: %s is %s, want a float tensor", what, w.Label(), w.DType)
	}
	if w.Len < need {
		return fmt.Errorf("%s: %s has %d elements, need %d", what, w.Label(), w.Len, need)
	}
	return nil
}
