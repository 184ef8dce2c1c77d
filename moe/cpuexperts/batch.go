//go:build linux && amd64 && cgo

package cpuexperts

/*
#include <stdlib.h>
#include "kt_moe.h"

// kt_forward_ptrs is kt_forward over a batch given as separate pointers:
// Go memory passed to C for the duration of one call needs no pinning,
// while a struct holding Go pointers would.
static int kt_forward_ptrs(kt_engine* e, const kt_layer* l, int32_t ntok, int32_t k, const void* x, int32_t x_bf16,
                           const int32_t* ids, const float* wts, void* out, int32_t out_bf16, int32_t incr) {
  kt_batch b = {0};
  b.ntok = ntok;
  b.k = k;
  b.x = x;
  b.x_bf16 = x_bf16;
  b.ids = ids;
  b.wts = wts;
  b.out = out;
  b.out_bf16 = out_bf16;
  b.incremental = incr;
  return kt_forward(e, l, &b);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Batch is one forward call: Tokens rows of activations, TopK expert ids and
// weights per token, and the output. Exactly one of X / XBF16 and one of
// Out / OutBF16 is set. Ids < 0 or >= Experts, and experts in the skip mask,
// contribute nothing.
type Batch struct {
	Tokens, TopK int
	X            []float32 // [Tokens][Hidden]
	XBF16        []uint16  // [Tokens][Hidden] bf16 bit patterns
	IDs          []int32   // [Tokens][TopK]
	Weights      []float32 // [Tokens][TopK]
	Out          []float32 // [Tokens][Hidden]
	OutBF16      []uint16
	// Incremental adds onto Out instead of overwriting it.
	Incremental bool
	// Release, for Submit: when set, the engine stores ReleaseValue into
	// *Release (a release store) as soon as the task ends, its outputs
	// complete or the task failed, before its completion is counted and
	// any Sync returns. A GPU stream waiting on that word of pinned host
	// memory (cuda.Stream.WaitHost) goes on without
	// a round trip through the caller. Forward ignores it.
	Release      *uint32
	ReleaseValue uint32
}

func (l *Layer) check(b *Batch) error {
	if l.c == nil {
		return errors.New("layer is closed")
	}
	if l.e.c == nil {
		return errors.New("cpu expert engine is closed")
	}
	c := l.e.cfg
	if b.Tokens < 0 || b.Tokens > c.MaxTokens {
		return fmt.Errorf("batch of %d tokens: the engine holds at most %d (max tokens)", b.Tokens, c.MaxTokens)
	}
	if b.TopK < 1 || b.TopK > c.TopK {
		return fmt.Errorf("top-k %d: the engine holds 1..%d", b.TopK, c.TopK)
	}
	n, nk := b.Tokens*l.spec.Hidden, b.Tokens*b.TopK
	if (b.X == nil) == (b.XBF16 == nil) {
		return errors.New("batch needs exactly one of X and XBF16")
	}
	if (b.Out == nil) == (b.OutBF16 == nil) {
		return errors.New("batch needs exactly one of Out and OutBF16")
	}
	if len(b.X) < n && len(b.XBF16) < n {
		return fmt.Errorf("batch input holds %d values, want %d tokens x %d", max(len(b.X), len(b.XBF16)), b.Tokens, l.spec.Hidden)
	}
	if len(b.Out) < n && len(b.OutBF16) < n {
		return fmt.Errorf("batch output holds %d values, want %d tokens x %d", max(len(b.Out), len(b.OutBF16)), b.Tokens, l.spec.Hidden)
	}
	if len(b.IDs) < nk || len(b.Weights) < nk {
		return fmt.Errorf("batch has %d ids and %d weights, want %d tokens x top-%d", len(b.IDs), len(b.Weights), b.Tokens, b.TopK)
	}
	return nil
}

// Submit queues the layer's forward over b and returns at once. The batch's
// slices are pinned and must not be touched until Engine.Sync returns.
func (l *Layer) Submit(b *Batch) error {
	if err := l.check(b); err != nil {
		return err
	}
	if b.Tokens == 0 {
		return nil
	}
	var cb C.kt_batch
	cb.ntok = C.int32_t(b.Tokens)
	cb.k = C.int32_t(b.TopK)
	e := l.e
	e.mu.Lock()
	defer e.mu.Unlock()
	pin := func(p unsafe.Pointer) unsafe.Pointer {
		e.pinned.Pin(p)
		e.npinned++
		return p
	}
	if b.X != nil {
		cb.x = pin(unsafe.Pointer(&b.X[0]))
	} else {
		cb.x = pin(unsafe.Pointer(&b.XBF16[0]))
		cb.x_bf16 = 1
	}
	if b.Out != nil {
		cb.out = pin(unsafe.Pointer(&b.Out[0]))
	} else {
		cb.out = pin(unsafe.Pointer(&b.OutBF16[0]))
		cb.out_bf16 = 1
	}
	cb.ids = (*C.int32_t)(pin(unsafe.Pointer(&b.IDs[0])))
	cb.wts = (*C.float)(pin(unsafe.Pointer(&b.Weights[0])))
	if b.Incremental {
		cb.incremental = 1
	}
	if b.Release != nil {
		cb.release = (*C.uint32_t)(pin(unsafe.Pointer(b.Release)))
		cb.release_value = C.uint32_t(b.ReleaseValue)
	}
	for C.kt_submit(e.c, l.c, &cb) != 0 {
		C.kt_sync(e.c, 0)
	}
	return nil
}

// prefetchMax is the most experts one Prefetch reads.
const prefetchMax = C.KT_PF_MAX

// Prefetch queues a task that reads the weights of the experts in ids (the
// most likely first; ids < 0 or past the layer's experts, repeats, experts in
// the skip mask and any past the first prefetchMax are left out) into the
// engine's caches, so that a task of this layer submitted next finds them
// there. The task stops reading as soon as any other task is queued behind
// it. It is a hint: when the queue is full, nothing is queued. ids is copied;
// Sync waits for the task as for any other.
func (l *Layer) Prefetch(ids []int32) {
	if len(ids) == 0 {
		return
	}
	e := l.e
	e.mu.Lock()
	defer e.mu.Unlock()
	C.kt_prefetch(e.c, l.c, (*C.int32_t)(unsafe.Pointer(&ids[0])), C.int(len(ids)))
}

// Forward runs the layer on b and waits for it (and for every task
// submitted before). It is one call into C: the batch's memory is used only
// during the call, so nothing is pinned.
func (l *Layer) Forward(b *Batch) error {
	if err := l.check(b); err != nil {
		return err
	}
	if b.Tokens == 0 {
		return l.e.Sync()
	}
	cb := func(v bool) C.int32_t {
		if v {
			return 1
		}
		return 0
	}
	x, xbf := unsafe.Pointer(nil), b.XBF16 != nil
	if xbf {
		x = unsafe.Pointer(&b.XBF16[0])
	} else {
		x = unsafe.Pointer(&b.X[0])
	}
	out, obf := unsafe.Pointer(nil), b.OutBF16 != nil
	if obf {
		out = unsafe.Pointer(&b.OutBF16[0])
	} else {
		out = unsafe.Pointer(&b.Out[0])
	}
	e := l.e
	r := C.kt_forward_ptrs(e.c, l.c, C.int32_t(b.Tokens), C.int32_t(b.TopK), x, cb(xbf),
		(*C.int32_t)(unsafe.Pointer(&b.IDs[0])), (*C.float)(unsafe.Pointer(&b.Weights[0])), out, cb(obf), cb(b.Incremental))
	runtime.KeepAlive(b)
	e.mu.Lock()
	if e.npinned > 0 { // tasks submitted before are done too
		e.pinned.Unpin()
		e.npinned = 0
	}
	e.mu.Unlock()
	if r != 0 {
		var msg [256]C.char
		if C.kt_take_error(e.c, &msg[0], C.int(len(msg))) != 0 {
			return fmt.Errorf("cpu expert task: %s", C.GoString(&msg[0]))
		}
	}
	return nil
}
