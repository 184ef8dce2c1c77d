package qwen3moe

import (
	"testing"

	"github.com/ktserve/kt/arch/internal/modeltest"
	"github.com/ktserve/kt/model"
)

// TestDecodeDoesNotAllocate checks the hot loop: once buffers have grown to
// the step shapes, a decode step allocates nothing.
func TestDecodeDoesNotAllocate(t *testing.T) {
	for _, simd := range []bool{true, false} {
		r := load(t, "qwen3moe-b", simd)
		modeltest.Forward(t, r, 0, []int32{1, 2, 3}, false)
		pos := 3
		var out model.Logits
		b := model.Batch{Chunks: []model.Chunk{{Slot: 0, Tokens: []int32{5}}}}
		step := func() {
			if err := r.Reserve(0, 1); err != nil {
				t.Fatal(err)
			}
			b.Chunks[0].Pos = pos
			if err := r.Forward(&b, &out); err != nil {
				t.Fatal(err)
			}
			pos++
		}
		step()
		if n := testing.AllocsPerRun(40, step); n != 0 {
			t.Errorf("simd=%v: %v allocations per decode step", simd, n)
		}
	}
}
