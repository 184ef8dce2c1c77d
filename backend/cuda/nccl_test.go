//go:build cgo

package cuda

import (
	"strings"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// TestNCCLType checks the activation dtypes' NCCL data types (nccl.h's
// ncclFloat32 = 7, ncclBfloat16 = 9) and the refusal of the others.
func TestNCCLType(t *testing.T) {
	for _, c := range []struct {
		dt   tensor.DType
		want int
		ok   bool
	}{{tensor.F32, 7, true}, {tensor.BF16, 9, true}, {tensor.I32, 0, false}, {tensor.F16, 0, false}} {
		got, err := ncclType(c.dt)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("%s: %d %v, want %d (ok %v)", c.dt, got, err, c.want, c.ok)
		}
	}
}

// fakeRanks are backends on the given GPU ordinals, for the checks made
// before any GPU or NCCL call.
func fakeRanks(ordinals ...int) []*Backend {
	var bes []*Backend
	for _, o := range ordinals {
		bes = append(bes, &Backend{d: &Device{Info: Info{Ordinal: o}}})
	}
	return bes
}

// TestNCCLGroupArguments checks what NewNCCLGroup refuses before it calls
// ncclCommInitAll: no ranks, a rank without a backend, two ranks on one
// GPU; and, where libnccl.so.2 is not installed, the group itself.
func TestNCCLGroupArguments(t *testing.T) {
	for _, c := range []struct {
		bes  []*Backend
		want string
	}{
		{nil, "a group of no GPUs"},
		{[]*Backend{nil}, "rank 0 has no backend"},
		{fakeRanks(0, 1, 0), "GPU 0 given to two ranks"},
	} {
		if _, err := NewNCCLGroup(c.bes); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d ranks: %v, want %q", len(c.bes), err, c.want)
		}
	}
	devs, err := ncclDevices(fakeRanks(2, 3, 0, 1))
	if err != nil || len(devs) != 4 || devs[0] != 2 || devs[3] != 1 {
		t.Errorf("ordinals %v %v, want [2 3 0 1] in rank order", devs, err)
	}
	if LoadLibraries().Err["nccl"] == nil {
		t.Log("NCCL is installed: the group itself is tested on GPUs (TestNCCLCollectives)")
		return
	}
	if _, err := NewNCCLGroup(fakeRanks(0, 1)); err == nil || !strings.Contains(err.Error(), "needs NCCL") {
		t.Errorf("without libnccl: %v, want it named", err)
	}
}
