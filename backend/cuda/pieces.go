//go:build cgo

package cuda

/*
#include "ktcuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/ktserve/kt/backend"
)

// PieceGatesEnv names the environment variable that chooses how a gated
// piece waits for its gate (see pieceSync): "memop" (a stream wait on the
// word, cuStreamWaitValue32), "kernel" (a one-thread kernel that loads the
// word until it is set), or "0" for no gates — each piece is then launched
// only after the host work before it, as before gates existed (for A/B
// runs, and a way out should a driver mishandle them).
const PieceGatesEnv = "KT_CUDA_PIECE_GATES"

// gateModes are PieceGatesEnv's values; the first is the default.
var gateModes = []string{"memop", "kernel", "0"}

// maxPieces bounds the pieces of one gated step (a gate and a ready word
// each); a capture with more fails, and the step runs op by op.
const maxPieces = 1024

// pieceSync holds the pinned words through which the pieces of a gated
// piecewise step (CaptureSegments) and the host work between them
// synchronise, so that the host can launch piece i+1 before it runs the
// work between pieces i and i+1 (the hybrid step's CPU experts), taking
// the launch off the step's critical path:
//
//   - gate i (word i): piece i+1 begins with a stream wait until it is 1
//     (WaitHost32); the host opens it (OpenGate) once its work between the
//     two pieces is done.
//   - ready i (word maxPieces+i): where the model marked a point of piece
//     i (PieceReady, the hybrid step: after the layer's copies to host), a
//     stream store sets it to 1; the host work after piece i waits for it
//     (a load loop, no driver call).
//
// LaunchPiece clears piece i's ready word and the gate it waits for before
// it launches it. The previous step's use of both ended before this step
// began (a step's logits are read after its last piece), so clearing them
// there races with nothing, and a step that failed midway leaves no word
// set for the next one.
type pieceSync struct {
	buf   *HostBuffer
	words []uint32
	tried bool   // the gates were set up (or found unavailable)
	off   string // why pieces are not gated ("" when they are, once tried)
	// while a gated step is recorded: the piece being recorded
	recording bool
	cur       int
}

// pieceGates reports whether piecewise steps are recorded with gates,
// setting them up on first use: pinned words, and a probe that the stream
// can wait for a word the host set and store one the host then reads
// (it waits for the stream). Call it outside a capture.
func (b *Backend) pieceGates() bool {
	ps := &b.pieces
	if ps.tried {
		return ps.off == ""
	}
	ps.tried = true
	switch b.gateMode {
	case "0":
		ps.off = PieceGatesEnv + "=0"
		return false
	case "memop", "kernel":
	default:
		ps.off = fmt.Sprintf("%s=%s: want one of %v", PieceGatesEnv, b.gateMode, gateModes)
		return false
	}
	buf, err := b.d.AllocHost(8 * maxPieces)
	if err != nil {
		ps.off = err.Error()
		return false
	}
	words := HostSlice[uint32](buf)
	clear(words)
	atomic.StoreUint32(&words[0], 1)
	ps.buf, ps.words = buf, words
	err = errors.Join(b.waitGate(0), b.s.WriteHost32(buf, 4*maxPieces, 7), b.s.Synchronize())
	if err == nil && atomic.LoadUint32(&words[maxPieces]) != 7 {
		err = errors.New("a stream's store did not reach host memory")
	}
	if err != nil {
		_ = buf.Free()
		ps.buf, ps.words = nil, nil
		ps.off = "gates on pinned host memory (" + b.gateMode + "): " + err.Error()
		return false
	}
	clear(words)
	return true
}

// waitGate queues the wait for gate i: a stream wait on its word, or the
// one-thread kernel that loads it until it is set.
func (b *Backend) waitGate(i int) error {
	ps := &b.pieces
	if b.gateMode == "kernel" {
		p, err := ps.buf.word32(4 * int64(i))
		if err != nil {
			return err
		}
		return b.d.launch(b.s, "m_gate_wait", grid1(1), grid1(1), 0, p)
	}
	return b.s.WaitHost32(ps.buf, 4*int64(i), 1)
}

// PieceGates reports whether piecewise steps are recorded with gates, and
// why not; it sets them up on first use (call it outside a capture).
func (b *Backend) PieceGates() (bool, string) {
	if b.closed {
		return false, "the backend is closed"
	}
	if b.s.Capturing() {
		return false, "asked during a capture"
	}
	return b.pieceGates(), b.pieces.off
}

// DisablePieceGates records piecewise steps without gates from now on
// (why says for whom); steps recorded with gates before keep them.
func (b *Backend) DisablePieceGates(why string) {
	ps := &b.pieces
	ps.tried = true
	if ps.off == "" {
		ps.off = why
	}
}

// gateNext begins the recording of the next piece of a gated step: the
// stream waits for the previous piece's gate.
func (b *Backend) gateNext() error {
	ps := &b.pieces
	ps.cur++
	if ps.cur >= maxPieces {
		return fmt.Errorf("cuda: a piecewise step of more than %d pieces", maxPieces)
	}
	return b.waitGate(ps.cur - 1)
}

// PieceReady, while a gated piecewise step is recorded, queues the store
// of the current piece's ready word after the work queued so far and
// returns the wait for it, for the host work that follows this piece at
// replay. ok is false when the step is not recorded with gates (the
// caller then marks the point another way, an event).
func (b *Backend) PieceReady() (wait func() error, ok bool, err error) {
	ps := &b.pieces
	if !ps.recording {
		return nil, false, nil
	}
	i := ps.cur
	if err := b.s.WriteHost32(ps.buf, 4*int64(maxPieces+i), 1); err != nil {
		return nil, true, err
	}
	return func() error { return b.waitReady(i) }, true, nil
}

// readySpins is how many loads of a ready word pass between two queries
// of the stream's state (a fault, or a piece that ended without its
// signal): with a pause between loads (~50 ns on the machines measured)
// a few hundred µs.
const readySpins = 1 << 12

// waitReady waits until piece i's ready word is set, loading it in a loop
// with a pause between loads (the calling thread spins, as the event wait
// it replaces did, without taking issue slots from a sibling thread); it
// returns the stream's error should the GPU fail meanwhile.
func (b *Backend) waitReady(i int) error {
	w := &b.pieces.words[maxPieces+i]
	for {
		if C.kt_spin_word((*C.uint32_t)(unsafe.Pointer(w)), readySpins) != 0 {
			return nil
		}
		done, err := b.s.Query()
		if err != nil {
			return fmt.Errorf("cuda: waiting for piece %d: %w", i, err)
		}
		if done && atomic.LoadUint32(w) == 0 {
			return fmt.Errorf("cuda: piece %d ended without its ready signal", i)
		}
	}
}

// Gated reports whether g is a piece of a step recorded with gates: a
// replay must launch it with LaunchPiece and open the gate before it.
func (b *Backend) Gated(g backend.StepGraph) bool {
	cg, ok := g.(*Graph)
	return ok && cg != nil && cg.gated
}

// LaunchPiece launches a piece of a gated step (any graph, as ReplayStep
// does): for a gated piece it clears its ready word and the gate it waits
// for first (see pieceSync). An error (of this launch or of the step's
// earlier work) is returned as well as recorded, so that the caller stops
// launching and opens the gates of what it launched.
func (b *Backend) LaunchPiece(g backend.StepGraph) error {
	cg, ok := g.(*Graph)
	if !ok || cg == nil || cg.e == nil {
		b.fail("LaunchPiece: not a live graph of the cuda backend")
		return b.err
	}
	if !b.ok() {
		if b.err == nil {
			return errors.New("cuda: the backend is closed")
		}
		return b.err
	}
	if cg.gated {
		ps := &b.pieces
		atomic.StoreUint32(&ps.words[maxPieces+cg.piece], 0)
		if cg.piece > 0 {
			atomic.StoreUint32(&ps.words[cg.piece-1], 0)
		}
	}
	if !b.check("LaunchPiece", cg.Launch(b.s)) {
		return b.err
	}
	return nil
}

// OpenGate lets piece i+1 of the gated step being replayed start.
func (b *Backend) OpenGate(i int) {
	if ps := &b.pieces; i >= 0 && i < maxPieces && ps.words != nil {
		atomic.StoreUint32(&ps.words[i], 1)
	}
}
