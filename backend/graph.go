package backend

// StepGraph is a step's ops recorded by a GraphBackend, replayed with
// GraphBackend.ReplayStep.
type StepGraph interface {
	// Destroy releases the graph.
	Destroy() error
}

// GraphBackend is implemented by backends that can record the ops of a
// step once and replay them for later steps of the same shape (the CUDA
// backend: CUDA graphs). A replay computes the step set last with SetStep,
// provided that step has the same number of rows and sequences, the same
// rows per sequence and the same output rows count as the captured one:
// ops read the step's values (tokens, positions, page tables, lengths) from
// buffers of fixed address and size their launches from those counts only.
type GraphBackend interface {
	// ReserveStep sizes the step layout buffers for steps of up to
	// tokens rows, seqs sequences and pages KV page ids in all, so that
	// SetStep within those bounds does not move them.
	ReserveStep(tokens, seqs, pages int) error
	// CaptureStep records the ops fn queues instead of running them.
	// Run the same ops once without capturing first, so that every
	// scratch buffer they need exists. An op that cannot be recorded
	// (a synchronisation, an allocation) makes CaptureStep fail and
	// leaves the backend usable; the step then has to run eagerly.
	CaptureStep(fn func()) (StepGraph, error)
	// ReplayStep queues g, a graph of this backend, for the step set last.
	ReplayStep(g StepGraph)
	// GraphEpoch changes whenever memory that a captured graph may
	// reference moves (a scratch buffer regrown for a larger step):
	// graphs captured in an earlier epoch must not be replayed.
	GraphEpoch() uint64
	// ReadPinned waits for queued ops and returns the first rows rows of
	// the F32 tensor t in host memory the backend owns (page-locked, so
	// the copy runs at full speed); the slice stays valid until the next
	// ReadPinned or Close.
	ReadPinned(t Tensor, rows int) ([]float32, error)
}
