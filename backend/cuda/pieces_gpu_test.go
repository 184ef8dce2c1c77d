//go:build cgo

package cuda

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/ktserve/kt/tensor"
)

// TestGatedPieces records a step of three gated pieces with host work
// between them, as the hybrid step does (copy to pinned memory, mark the
// point, host computes, copy back), and replays it the gated way: piece
// i+1 launched before the host work after piece i, which opens its gate.
// The results must be the host work's in every round, the gate must hold
// a launched piece until it opens, a plain ReplayStep of every piece must
// not wait for any gate, and a wait for a ready word that no running
// piece sets must fail instead of spinning for ever. Needs a GPU.
func TestGatedPieces(t *testing.T) {
	d := testDevice(t)
	for _, mode := range gateModes[:2] {
		t.Run(mode, func(t *testing.T) {
			t.Setenv(PieceGatesEnv, mode)
			gatedPieces(t, d)
		})
	}
}

func gatedPieces(t *testing.T, d *Device) {
	b, err := NewBackendOn(d)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if ok, why := b.PieceGates(); !ok {
		t.Fatalf("pieces not gated on this GPU: %s", why)
	}
	const n = 1024
	xv := make([]float32, n)
	for i := range xv {
		xv[i] = float32(i%97) - 40
	}
	x := devTensor(t, b, tensor.F32, xv, 1, n)
	y := devTensor(t, b, tensor.F32, nil, 1, n)
	yb, _ := b.DeviceBuffer(y)
	pin, err := d.AllocHost(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Free()
	pout, err := d.AllocHost(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pout.Free()
	pins, pouts := HostSlice[float32](pin), HostSlice[float32](pout)

	var waits []func() error
	mark := func() {
		w, ok, err := b.PieceReady()
		if err != nil || !ok {
			t.Fatalf("PieceReady while recording: ok %v, %v", ok, err)
		}
		waits = append(waits, w)
	}
	segs, err := b.CaptureSegments(func(cut func() error) {
		b.Add(y, x, x, 1) // y = 2x
		_ = b.s.CopyDtoH(pin, 0, yb, n*4)
		mark()
		if cut() != nil {
			return
		}
		_ = b.s.CopyHtoD(yb, pout, 0, n*4) // y = host's
		b.Add(y, y, x, 1)
		_ = b.s.CopyDtoH(pin, 0, yb, n*4)
		mark()
		if cut() != nil {
			return
		}
		b.Add(y, y, x, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range segs {
			g.Destroy()
		}
	}()
	if len(segs) != 3 || len(waits) != 2 {
		t.Fatalf("%d pieces, %d marks", len(segs), len(waits))
	}
	for i, g := range segs {
		if !b.Gated(g) {
			t.Fatalf("piece %d not gated", i)
		}
	}
	if _, ok, _ := b.PieceReady(); ok {
		t.Fatal("PieceReady outside a recording")
	}
	host := func(round int) {
		for i := range pouts {
			pouts[i] = 3*pins[i] + float32(round)
		}
	}
	for round := range 4 {
		clear(pins)
		must(t, b.LaunchPiece(segs[0]))
		must(t, b.LaunchPiece(segs[1]))
		must(t, waits[0]())
		host(round)
		if round == 0 {
			// piece 1 was launched: the gate must hold it
			time.Sleep(20 * time.Millisecond)
			if v := atomic.LoadUint32(&b.pieces.words[maxPieces+1]); v != 0 {
				t.Fatalf("piece 1 ran before its gate opened (ready word %d)", v)
			}
		}
		b.OpenGate(0)
		must(t, b.LaunchPiece(segs[2]))
		must(t, waits[1]())
		b.OpenGate(1)
		got := make([]float32, n)
		must(t, b.Read(got, y, 1))
		for i, v := range xv {
			want := 3*(2*v) + float32(round) + v + v
			if got[i] != want {
				t.Fatalf("round %d: y[%d] = %v, want %v", round, i, got[i], want)
			}
		}
	}

	// ReplayStep opens each piece's gate itself
	for _, g := range segs {
		b.ReplayStep(g)
	}
	done := make(chan error, 1)
	go func() { done <- b.Sync() }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("ReplayStep of gated pieces still waits after 10 s")
	}

	// a ready word that nothing sets any more: the wait reports it
	atomic.StoreUint32(&b.pieces.words[maxPieces+1], 0)
	if err := waits[1](); err == nil {
		t.Fatal("waiting for a ready word no piece sets returned no error")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
