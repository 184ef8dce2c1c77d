package backend

import (
	"slices"
	"strings"
	"testing"

	"github.com/ktserve/kt/tensor"
)

// arg is a named tensor argument of n elements.
func arg(name string, dt tensor.DType, n int, shape ...int) Arg {
	return Arg{Name: name, DType: dt, Shape: shape, Len: n}
}

func TestChecks(t *testing.T) {
	kv := &KVCache{PageSize: 4, KVHeads: 2, HeadDim: 8, TotalPages: 3}
	attn := &Attn{Heads: 4, KVHeads: 2, HeadDim: 8}
	seqs := []Seq{{Slot: 0, Start: 0, Len: 3, Pos: 2, Pages: []int32{0, 1}}}
	experts := &Experts{Gate: make([]Tensor, 2), Up: make([]Tensor, 2), Down: make([]Tensor, 2)}
	for _, tc := range []struct {
		name string
		err  error
		want string // "" = no error
	}{
		{"F32 ok", CheckF32("Add a", arg("x", tensor.F32, 8), 8), ""},
		{"F32 dtype", CheckF32("Add a", arg("x", tensor.BF16, 8), 8), "Add a: x is BF16, want F32"},
		{"F32 short", CheckF32("Add a", arg("x", tensor.F32, 7), 8), "Add a: x has 7 elements, need 8"},
		{"float weight ok", CheckFloatWeight("w", arg("n", tensor.F16, 4), 1), ""},
		{"float weight dtype", CheckFloatWeight("w", arg("n", tensor.I32, 4), 1), "w: n is I32, want a float tensor"},
		{"float weight short", CheckFloatWeight("w", arg("n", tensor.BF16, 0), 1), "w: n has 0 elements, need 1"},
		{"matrix ok", CheckMatrix("MatMul", "weight", arg("w", tensor.BF16, 0, 2, 3)), ""},
		{"matrix 3-D", CheckMatrix("MatMul", "weight", arg("w", tensor.BF16, 0, 2, 3, 1)), "MatMul: weight w must be a 2-D float tensor"},
		{"matrix int", CheckMatrix("Embed", "table", arg("t", tensor.I32, 0, 2, 3)), "Embed: table t must be a 2-D float tensor"},
		{"tokens ok", CheckTokens([]int32{0, 9}, 10), ""},
		{"token high", CheckTokens([]int32{0, 10}, 10), "token id 10 outside vocabulary [0,10)"},
		{"token negative", CheckTokens([]int32{-1}, 10), "token id -1 outside"},
		{"matmul ok", CheckMatMul(3, 2, arg("w", tensor.BF16, 2*3, 2, 3)), ""},
		{"matmul x", CheckMatMul(4, 2, arg("w", tensor.BF16, 2*3, 2, 3)), "MatMul: x width 4, out width 2 do not match weight w [2,3]"},
		{"norm ok", CheckNormWeight("RMSNorm", arg("w", tensor.BF16, 4, 4)), ""},
		{"norm empty", CheckNormWeight("RMSNorm", arg("w", tensor.BF16, 0, 0)), "RMSNorm: weight w is BF16"},
		{"norm int", CheckNormWeight("RMSNorm", arg("w", tensor.I32, 4, 4)), "RMSNorm: weight w is I32"},
		{"rope ok", CheckRope(&Rope{HeadDim: 8, RotaryDim: 4}, 3, 3), ""},
		{"rope odd", CheckRope(&Rope{HeadDim: 8, RotaryDim: 3}, 3, 3), "rotary dim 3 invalid for head dim 8"},
		{"rope wide", CheckRope(&Rope{HeadDim: 8, RotaryDim: 10}, 3, 3), "rotary dim 10 invalid"},
		{"rope rows", CheckRope(&Rope{HeadDim: 8, RotaryDim: 8}, 4, 3), "Rope: 4 rows but the step has 3"},
		{"attention ok", CheckAttention(attn, kv, 3, 3), ""},
		{"attention heads", CheckAttention(&Attn{Heads: 3, KVHeads: 2, HeadDim: 8}, kv, 3, 3), "3 heads, 2 kv heads, head dim 8 do not fit the cache (2 kv heads x 8)"},
		{"attention no kv heads", CheckAttention(&Attn{Heads: 4, HeadDim: 8}, kv, 3, 3), "do not fit the cache"},
		{"attention head dim", CheckAttention(&Attn{Heads: 4, KVHeads: 2, HeadDim: 16}, kv, 3, 3), "head dim 16 do not fit"},
		{"attention rows", CheckAttention(attn, kv, 2, 3), "Attention: 2 rows but the step has 3 tokens"},
		{"pages ok", CheckKVPages(seqs, kv), ""},
		{"pages short", CheckKVPages([]Seq{{Slot: 5, Len: 3, Pos: 2, Pages: []int32{0}}}, kv), "slot 5 has 1 KV pages, needs 2"},
		{"page outside", CheckKVPages([]Seq{{Slot: 5, Len: 3, Pos: 2, Pages: []int32{3, 0}}}, kv), "slot 5 uses KV page 3 outside [0,3)"},
		{"page negative", CheckKVPages([]Seq{{Slot: 1, Len: 1, Pages: []int32{-1}}}, kv), "uses KV page -1"},
		{"page size", CheckKVPages(seqs, &KVCache{}), "Attention: page size 0"},
		{"topk ok", CheckTopK(2, 8), ""},
		{"topk zero", CheckTopK(0, 8), "RouterTopK: top-k 0 with 8 experts"},
		{"topk many", CheckTopK(9, 8), "top-k 9 with 8 experts"},
		{"router ids ok", CheckRouterIDs(arg("ids", tensor.I32, 6, 6), 6), ""},
		{"router ids f32", CheckRouterIDs(arg("ids", tensor.F32, 6, 6), 6), "RouterTopK: ids ids must be I32 with 6 elements"},
		{"router ids short", CheckRouterIDs(arg("ids", tensor.I32, 5, 5), 6), "must be I32 with 6 elements"},
		{"experts ok", CheckExperts(experts), ""},
		{"experts none", CheckExperts(&Experts{}), "MoE: 0/0/0 gate/up/down experts"},
		{"experts uneven", CheckExperts(&Experts{Gate: make([]Tensor, 2), Up: make([]Tensor, 2), Down: make([]Tensor, 1)}), "2/2/1"},
		{"expert weight ok", CheckExpertWeight(1, arg("g", tensor.BF16, 12, 12), 3, 4), ""},
		{"expert weight size", CheckExpertWeight(1, arg("g", tensor.BF16, 11, 11), 3, 4), "MoE: expert 1 weight g does not match hidden 3 inter 4"},
		{"expert weight int", CheckExpertWeight(0, arg("g", tensor.I32, 12, 12), 3, 4), "expert 0 weight g does not match"},
		{"expert ids ok", CheckExpertIDs(arg("ids", tensor.I32, 6, 6), 3, 2), ""},
		{"expert ids f32", CheckExpertIDs(arg("ids", tensor.F32, 6, 6), 3, 2), "MoE: ids ids must be I32"},
		{"expert ids short", CheckExpertIDs(arg("ids", tensor.I32, 5, 5), 3, 2), "MoE: ids ids hold fewer than 3 x 2"},
		{"gather ok", CheckGather(1, 2, 3), ""},
		{"gather past", CheckGather(2, 2, 3), "GatherRows: rows [2,4) outside the step's 3 output rows"},
		{"gather negative", CheckGather(-1, 1, 3), "rows [-1,0)"},
		{"read ok", CheckRead(6, 6), ""},
		{"read short", CheckRead(5, 6), "Read: destination holds 5 floats, need 6"},
		{"spans ok", CheckSpans("CausalConv1D", seqs, 3), ""},
		{"spans past", CheckSpans("CausalConv1D", seqs, 2), "CausalConv1D: step sequence 0 spans rows [0,3) beyond 2"},
		{"layer ok", CheckLayer("GatedDeltaRule", 1, 2), ""},
		{"layer past", CheckLayer("GatedDeltaRule", 2, 2), "GatedDeltaRule: layer 2 outside [0,2)"},
		{"layer negative", CheckLayer("GatedDeltaRule", -1, 2), "layer -1 outside"},
		{"width ok", CheckWidth("GatedDeltaRule", "qkv", 5, 5), ""},
		{"width", CheckWidth("GatedDeltaRule", "qkv", 4, 5), "GatedDeltaRule: qkv width 4, want 5"},
		{"gates ok", CheckDeltaGates(arg("a", tensor.BF16, 4, 4), arg("d", tensor.F32, 4, 4)), ""},
		{"gates length", CheckDeltaGates(arg("a", tensor.BF16, 4, 4), arg("d", tensor.F32, 3, 3)), "DeltaGates: A_log a and dt_bias d must be float vectors of one length"},
		{"gates int", CheckDeltaGates(arg("a", tensor.I32, 4, 4), arg("d", tensor.F32, 4, 4)), "must be float vectors"},
		{"gate width ok", CheckGateWidth(8, 8), ""},
		{"gate width one", CheckGateWidth(1, 8), ""},
		{"gate width", CheckGateWidth(4, 8), "SigmoidGate: gate width 4 must be 1 or x's width 8"},
		{"unnamed label", CheckF32("Add a", arg("", tensor.BF16, 6, 2, 3), 6), "Add a: BF16[2 3] is BF16, want F32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.want == "" && tc.err != nil:
				t.Fatalf("unexpected error %v", tc.err)
			case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", tc.err, tc.want)
			}
		})
	}
}

func TestCheckStepRows(t *testing.T) {
	s := &Step{Tokens: make([]int32, 5), Seqs: []Seq{{Start: 0, Len: 2}, {Start: 2, Len: 3}}}
	rows := make([]int32, 5)
	if err := CheckStepRows(s, rows); err != nil {
		t.Fatal(err)
	}
	if want := []int32{0, 0, 1, 1, 1}; !slices.Equal(rows, want) {
		t.Fatalf("row sequences %v, want %v", rows, want)
	}
	for _, q := range []Seq{{Start: -1, Len: 2}, {Start: 4, Len: 2}, {Start: 0, Len: 0}} {
		bad := &Step{Tokens: make([]int32, 5), Seqs: []Seq{q}}
		err := CheckStepRows(bad, rows)
		if err == nil || !strings.Contains(err.Error(), "outside 5 tokens") {
			t.Errorf("sequence %+v: error %v", q, err)
		}
	}
}

func TestArgCols(t *testing.T) {
	for _, tc := range []struct {
		shape []int
		want  int
	}{{nil, 1}, {[]int{5}, 5}, {[]int{2, 3}, 3}, {[]int{4, 2, 7}, 7}} {
		if got := (Arg{Shape: tc.shape}).Cols(); got != tc.want {
			t.Errorf("Cols of %v = %d, want %d", tc.shape, got, tc.want)
		}
	}
}
