//go:build linux && amd64 && cgo

package routed

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/ktserve/kt/backend"
	"github.com/ktserve/kt/backend/cuda"
	"github.com/ktserve/kt/models/internal/runbase"
	"github.com/ktserve/kt/moe/cpuexperts"
)

// OverlapEnv names the environment variable that, set to 1, makes the
// hybrid step overlap the CPU experts with the GPU's work through stream
// host functions instead of running them on the calling thread between the
// GPU's ops. Off by default: on the H100 machine the overlapped form
// decoded 21% slower (docs/notes/hybrid.md) — two Go callbacks per layer
// from the driver's thread cost more than the shared expert it hides.
const OverlapEnv = "KT_HYBRID_OVERLAP"

// gpuLink is the hybrid step's bridge between the GPU backend and the CPU
// expert engine: pinned host buffers at fixed addresses for one step's
// layer input, router ids and weights and the experts' output, and per
// MoE layer the host functions that submit the layer's task and wait for
// it from the GPU stream (cuLaunchHostFunc).
//
// Overlapped (KT_HYBRID_OVERLAP=1), start queues on the backend's stream: the
// device-to-host copies of the layer input, ids and weights, then a host
// function that submits the engine task and returns; the model then queues
// its shared expert, which the GPU computes while the CPU runs the routed
// experts; join queues a host function that waits for the engine and the
// host-to-device copy of the result. The pinned buffers are shared by all
// layers: stream order puts a layer's copies in after the previous layer's
// task finished. Synchronous (the default), start waits for the stream,
// runs the engine on the calling thread, and join queues the copy back.
type gpuLink struct {
	be             *cuda.Backend
	s              *cuda.Stream
	x              *engine
	hid, k, maxTok int
	pinX, pinOut   *cuda.HostBuffer // f32 [maxTok][hid]
	pinIDs, pinWts *cuda.HostBuffer // i32 / f32 [maxTok][k]
	xs, outs, wts  []float32
	ids            []int32
	sync           bool
	layers         []*linkLayer // per model layer (nil for dense ones), overlapped only
	mu             sync.Mutex
	err            error // first error of a host function, reported by the next start or join
}

// linkLayer is one MoE layer's host functions and the token count of the
// step they serve (set before they are queued, read when they run).
type linkLayer struct {
	n            atomic.Int32
	batch        cpuexperts.Batch
	submit, wait *cuda.HostFunc
}

func newGPULink(rb *runbase.Base, x *engine, nLayers int) (*gpuLink, error) {
	be, ok := rb.BE.(*cuda.Backend)
	if !ok {
		return nil, fmt.Errorf("the model runs on %s: the hybrid step needs the CUDA backend or the CPU", rb.BE.Name())
	}
	T := rb.Opts.MaxBatchTokens
	g := &gpuLink{be: be, s: be.Stream(), x: x, hid: x.hid, k: x.k, maxTok: T, sync: os.Getenv(OverlapEnv) != "1"}
	var err error
	alloc := func(n int) *cuda.HostBuffer {
		if err != nil {
			return nil
		}
		var h *cuda.HostBuffer
		h, err = be.Device().AllocHost(int64(n) * 4)
		return h
	}
	g.pinX, g.pinOut = alloc(T*g.hid), alloc(T*g.hid)
	g.pinIDs, g.pinWts = alloc(T*g.k), alloc(T*g.k)
	if err != nil {
		g.close()
		return nil, fmt.Errorf("hybrid step: pinned buffers for %d tokens: %w", T, err)
	}
	g.xs, g.outs = cuda.HostSlice[float32](g.pinX), cuda.HostSlice[float32](g.pinOut)
	g.ids, g.wts = cuda.HostSlice[int32](g.pinIDs), cuda.HostSlice[float32](g.pinWts)
	if !g.sync {
		g.layers = make([]*linkLayer, nLayers)
	}
	return g, nil
}

// mode says how the CPU work is scheduled, for Path.
func (g *gpuLink) mode() string {
	if g.sync {
		return "CPU experts synchronous between the GPU's ops"
	}
	return "CPU experts overlapped with the GPU through stream host functions (" + OverlapEnv + "=1)"
}

// layer returns layer l's host functions, made on first use.
func (g *gpuLink) layer(l int) *linkLayer {
	if L := g.layers[l]; L != nil {
		return L
	}
	L := &linkLayer{}
	L.submit = cuda.NewHostFunc(func() {
		n := int(L.n.Load())
		L.batch = cpuexperts.Batch{Tokens: n, TopK: g.k, X: g.xs[:n*g.hid], IDs: g.ids[:n*g.k],
			Weights: g.wts[:n*g.k], Out: g.outs[:n*g.hid]}
		g.fail(g.x.layers[l].Submit(&L.batch))
	})
	L.wait = cuda.NewHostFunc(func() {
		g.fail(g.x.eng.Sync())
	})
	g.layers[l] = L
	return L
}

// fail records the first error of a host function.
func (g *gpuLink) fail(err error) {
	if err == nil {
		return
	}
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
}

// taken returns and clears the recorded host-function error.
func (g *gpuLink) taken() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.err
	g.err = nil
	return err
}

func (g *gpuLink) buf(t backend.Tensor, what string, bytes int) (cuda.Buffer, error) {
	b, ok := g.be.DeviceBuffer(t)
	if !ok {
		return cuda.Buffer{}, fmt.Errorf("%s is not a tensor of %s", what, g.be.Name())
	}
	if b.Size < int64(bytes) {
		return cuda.Buffer{}, fmt.Errorf("%s holds %d bytes, want %d", what, b.Size, bytes)
	}
	return b, nil
}

// start queues the copies of layer l's input rows, ids and weights to the
// pinned buffers and the engine's task (see gpuLink).
func (g *gpuLink) start(l int, h, wts, ids backend.Tensor, n int) error {
	if err := g.taken(); err != nil {
		return err
	}
	if n < 0 || n > g.maxTok {
		return fmt.Errorf("%d tokens: the hybrid step's buffers hold %d", n, g.maxTok)
	}
	if n == 0 {
		return nil
	}
	xb, err := g.buf(h, "layer input", n*g.hid*4)
	if err != nil {
		return err
	}
	ib, err := g.buf(ids, "expert ids", n*g.k*4)
	if err != nil {
		return err
	}
	wb, err := g.buf(wts, "expert weights", n*g.k*4)
	if err != nil {
		return err
	}
	if err := errors.Join(g.s.CopyDtoH(g.pinX, 0, xb, int64(n*g.hid*4)),
		g.s.CopyDtoH(g.pinIDs, 0, ib, int64(n*g.k*4)),
		g.s.CopyDtoH(g.pinWts, 0, wb, int64(n*g.k*4))); err != nil {
		return err
	}
	if g.sync {
		if err := g.be.Sync(); err != nil {
			return err
		}
		b := &g.x.batch
		*b = cpuexperts.Batch{Tokens: n, TopK: g.k, X: g.xs[:n*g.hid], IDs: g.ids[:n*g.k],
			Weights: g.wts[:n*g.k], Out: g.outs[:n*g.hid]}
		return g.x.layers[l].Forward(b)
	}
	L := g.layer(l)
	L.n.Store(int32(n))
	return g.s.LaunchHostFunc(L.submit)
}

// join queues the wait for layer l's task (overlapped) and the copy of
// its output to out.
func (g *gpuLink) join(l int, out backend.Tensor, n int) error {
	if n == 0 {
		return nil
	}
	ob, err := g.buf(out, "experts output", n*g.hid*4)
	if err != nil {
		return err
	}
	if !g.sync {
		if err := g.s.LaunchHostFunc(g.layer(l).wait); err != nil {
			return err
		}
	}
	return g.s.CopyHtoD(ob, g.pinOut, 0, int64(n*g.hid*4))
}

func (g *gpuLink) close() {
	if g.s != nil {
		_ = g.s.Synchronize() // no host function may still run
	}
	for _, L := range g.layers {
		if L != nil {
			L.submit.Release()
			L.wait.Release()
		}
	}
	for _, h := range []*cuda.HostBuffer{g.pinX, g.pinOut, g.pinIDs, g.pinWts} {
		if h != nil {
			_ = h.Free()
		}
	}
}
