//go:build cgo

package cuda

import "github.com/ktserve/kt/backend"

// Stream returns the stream every op of b is queued on, for callers that
// interleave their own copies, events and waits with the ops (the hybrid
// step: routed experts on the CPU between the GPU's ops).
func (b *Backend) Stream() *Stream { return b.s }

// DeviceBuffer returns the device memory of t, a tensor made by b; ok is
// false for a tensor of another backend.
func (b *Backend) DeviceBuffer(t backend.Tensor) (buf Buffer, ok bool) {
	ct, ok := t.(*Tensor)
	if !ok || ct == nil {
		return Buffer{}, false
	}
	return ct.buf, true
}
