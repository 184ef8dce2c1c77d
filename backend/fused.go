package backend

// Fused forms of op sequences the models repeat. A backend that can do a
// sequence in fewer passes (one launch on the GPU) implements the optional
// interface; MatMulGroup and AddRMSNorm call it where present and the plain
// ops otherwise, with the same results either way (the CUDA forms are
// bit-identical to the ops they replace).

// MatMulGrouper is implemented by backends that compute several MatMuls
// reading the same activations in one pass.
type MatMulGrouper interface {
	// MatMulGroup is MatMul(outs[i], x, ws[i], n) for every i.
	MatMulGroup(x Tensor, n int, outs, ws []Tensor)
}

// AddRMSNormer is implemented by backends that fuse a residual add with
// the RMSNorm that reads its result.
type AddRMSNormer interface {
	// AddRMSNorm is Add(x, x, t, n) followed by RMSNorm(h, x, w, eps, n).
	AddRMSNorm(h, x, t, w Tensor, eps float32, n int)
}

// MatMulGroup computes outs[i] = x·ws[i]ᵀ over n rows for every i, in one
// pass where be implements MatMulGrouper. outs and ws have equal lengths.
func MatMulGroup(be Ops, x Tensor, n int, outs, ws []Tensor) {
	if g, ok := be.(MatMulGrouper); ok {
		g.MatMulGroup(x, n, outs, ws)
		return
	}
	for i, w := range ws {
		be.MatMul(outs[i], x, w, n)
	}
}

// AddRMSNorm adds t to the residual x over n rows, then normalises the sum
// into h, fused where be implements AddRMSNormer.
func AddRMSNorm(be Ops, h, x, t, w Tensor, eps float32, n int) {
	if f, ok := be.(AddRMSNormer); ok {
		f.AddRMSNorm(h, x, t, w, eps, n)
		return
	}
	be.Add(x, x, t, n)
	be.RMSNorm(h, x, w, eps, n)
}

// Picker is implemented by backends that can pick the next token where
// the logits are, so that a decode step reads back two numbers per row
// instead of the vocabulary.
type Picker interface {
	// Pick writes, for each of the first rows rows of logits [rows, V],
	// out[r] = (i, lp) as float32: i the token the step's Draws[r]
	// (model.Draw; greedy without Draws) picks from row r — greedy: the
	// first index of the largest value, NaNs skipped — or -1 when no value
	// is above -Inf, and lp its log-softmax of the raw row, log-sum-exp
	// taken from the row's maximum as sample.LogSumExp does. out is F32
	// [≥ rows, 2].
	Pick(out, logits Tensor, rows int)
}
