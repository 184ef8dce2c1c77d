package backend

// LoRAOps is implemented by backends that run per-request LoRA deltas
// (both kt backends do). A model computes a module's delta with two MatMuls
// (d = (x Aᵀ) Bᵀ) and adds it with LoRAAdd, which keeps only the rows of
// the sequences that asked for the adapter, so one step may mix requests
// with and without it.
type LoRAOps interface {
	// LoRAAdd adds scale·d[i] to out[i] for the rows i < n whose step
	// sequence has Seq.Adapter == adapter; adapter < 0 selects every row.
	// out and d have the same width.
	LoRAAdd(out, d Tensor, scale float32, adapter, n int)
}

// StepHasAdapter reports whether some sequence of s uses adapter (adapter
// < 0: always, when s has rows).
func StepHasAdapter(s *Step, adapter int) bool {
	if adapter < 0 {
		return len(s.Tokens) > 0
	}
	for _, q := range s.Seqs {
		if q.Adapter == adapter {
			return true
		}
	}
	return false
}
