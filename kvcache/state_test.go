package kvcache

import "testing"

func TestStateStoreSlots(t *testing.T) {
	sh := StateShape{Layers: 3, ConvChannels: 10, ConvKernel: 4, KHeads: 2, VHeads: 4, KDim: 8, VDim: 6}
	s, err := NewStateStore(sh, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(3 * (3*10 + 4*8*6 + 64*2*8 + 64*4*6 + 64*4) * 4)
	if got := sh.BytesPerSeq(); got != want {
		t.Fatalf("BytesPerSeq = %d, want %d", got, want)
	}
	a, err := s.Get(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Layers) != 3 || len(a.Layers[2].Conv) != 30 || len(a.Layers[1].S) != 4*8*6 || len(a.Layers[0].G) != 64*4 {
		t.Fatalf("layer buffers sized wrong: %d layers, conv %d", len(a.Layers), len(a.Layers[2].Conv))
	}
	a.Layers[2].G[len(a.Layers[2].G)-1] = 5
	a.Layers[0].Conv[0] = 1
	a.Len = 70
	if again, _ := s.Get(0); again != a {
		t.Fatal("Get returned a different state for a held slot")
	}
	if _, err := s.Get(2); err == nil {
		t.Fatal("slot 2 of 2 accepted")
	}
	if _, err := s.Get(-1); err == nil {
		t.Fatal("slot -1 accepted")
	}
	b, _ := s.Get(1)
	if s.InUse() != 2 || s.Allocated() != 2 {
		t.Fatalf("in use %d, allocated %d; want 2, 2", s.InUse(), s.Allocated())
	}
	s.Free(0)
	s.Free(0) // double free is harmless
	if s.InUse() != 1 || s.Peek(0) != nil {
		t.Fatalf("after free: in use %d", s.InUse())
	}
	// Reuse takes the freed buffer, zeroed.
	c, _ := s.Get(0)
	if c == b {
		t.Fatal("slot 0 got slot 1's state")
	}
	if s.Allocated() != 2 {
		t.Fatalf("reuse allocated a new state: %d", s.Allocated())
	}
	if c.Len != 0 || c.OpenRows() != 0 || c.Layers[2].G[len(c.Layers[2].G)-1] != 0 || c.Layers[0].Conv[0] != 0 {
		t.Fatal("reused state not zeroed")
	}
}

func TestStateStoreRejects(t *testing.T) {
	good := StateShape{Layers: 1, ConvChannels: 1, ConvKernel: 1, KHeads: 1, VHeads: 1, KDim: 1, VDim: 1}
	if _, err := NewStateStore(good, 0); err == nil {
		t.Error("zero slots accepted")
	}
	bad := good
	bad.KDim = 0
	if _, err := NewStateStore(bad, 1); err == nil {
		t.Error("zero key dim accepted")
	}
	huge := good
	huge.Layers, huge.VHeads, huge.KDim, huge.VDim = 1<<20, 1<<10, 1<<10, 1<<10
	if _, err := NewStateStore(huge, 1<<20); err == nil {
		t.Error("overflowing store accepted")
	}
}
