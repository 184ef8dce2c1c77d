package backend

import "fmt"

// Tensor-parallel shards (package tp). A column-parallel weight's shard is
// rows of the checkpoint matrix (ExpertRows, GatherRows); a row-parallel
// one's is columns (GatherCols); a vocabulary-parallel embedding is rows of
// the table, looked up with EmbedVocab.

// VocabEmbedder is implemented by backends that look up a vocabulary
// shard of an embedding table.
type VocabEmbedder interface {
	// EmbedVocab is Embed over the table rows [first, first+V) of a
	// vocabulary (table [V, H] holds them): out[i] = table[t-first] for a
	// step token t in that range, a zero row for every other token.
	EmbedVocab(out, table Tensor, first int)
}

// GatherCols returns a copy of columns [first, first+count) of the 2-D
// weight h, named name. A block-scaled FP8 weight's scales come along: the
// slice keeps the block [bn, bk] and the scale columns of its blocks where
// it starts on a column block (and is whole blocks, or runs to the last
// column); anywhere else it gets one scale column per weight column, copied
// from the column's block (block [bn, 1]): the same value for every
// element, any split point. h must pass Check.
func GatherCols(h Host, name string, first, count int) (Host, error) {
	if err := h.Check(); err != nil {
		return Host{}, err
	}
	if len(h.Shape) != 2 {
		return Host{}, fmt.Errorf("tensor %s: gathering columns of a %d-D tensor", h.Name, len(h.Shape))
	}
	o, k := h.Shape[0], h.Shape[1]
	if first < 0 || count <= 0 || first+count > k {
		return Host{}, fmt.Errorf("tensor %s: columns [%d,%d) outside its %d columns", h.Name, first, first+count, k)
	}
	es := h.DType.Size()
	data := make([]byte, 0, o*count*es)
	for r := 0; r < o; r++ {
		data = append(data, h.Data[(r*k+first)*es:(r*k+first+count)*es]...)
	}
	out := Host{Name: name, DType: h.DType, Shape: []int{o, count}, Data: data}
	if !h.FP8() {
		return out, nil
	}
	bn, bk := h.Block[0], h.Block[1]
	sr, sc := (o+bn-1)/bn, (k+bk-1)/bk
	ss := h.Scale.DType.Size()
	var sd []byte
	blk := h.Block
	if fp8Aligned(first, count, k, bk) {
		c0, c1 := first/bk, (first+count+bk-1)/bk
		for r := 0; r < sr; r++ {
			sd = append(sd, h.Scale.Data[(r*sc+c0)*ss:(r*sc+c1)*ss]...)
		}
	} else {
		blk = [2]int{bn, 1}
		for r := 0; r < sr; r++ {
			for c := first; c < first+count; c++ {
				sd = append(sd, h.Scale.Data[(r*sc+c/bk)*ss:(r*sc+c/bk+1)*ss]...)
			}
		}
	}
	shape := FP8ScaleShape(o, count, blk)
	out.Block = blk
	out.Scale = &Host{Name: name + "_scale_inv", DType: h.Scale.DType, Shape: shape[:], Data: sd}
	return out, out.Check()
}
