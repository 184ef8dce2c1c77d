//go:build cgo

package cuda

import (
	"fmt"
	"strings"
	"testing"
)

// TestReportLines runs everywhere: on a machine without CUDA the report must
// say why the GPU is not used; with one it lists the GPUs.
func TestReportLines(t *testing.T) {
	r := Check(0, false)
	lines := r.Lines()
	if len(lines) == 0 {
		t.Fatal("empty report")
	}
	joined := strings.Join(lines, "\n")
	if r.Err != nil && !strings.Contains(joined, "running on the CPU") {
		t.Fatalf("report without a GPU does not say why:\n%s", joined)
	}
	if r.Err == nil && len(r.GPUs) == 0 {
		t.Fatalf("no error and no GPU:\n%s", joined)
	}
	t.Logf("\n%s", joined)
}

// TestReportCompile is the doctor's kernel-compile check (GPU only).
func TestReportCompile(t *testing.T) {
	testDevice(t)
	r := Check(0, true)
	if r.KernelErr != nil {
		t.Fatal(r.KernelErr)
	}
	ix, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kernels) != len(ix.mods) {
		t.Fatalf("%d modules checked, %d embedded", len(r.Kernels), len(ix.mods))
	}
	t.Logf("\n%s", strings.Join(r.Lines(), "\n"))
}

func TestKernelSourcesIndex(t *testing.T) {
	ix, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	mods, names, params := ix.mods, ix.names, ix.params
	for want, mod := range map[string]string{"m_embed": "rows", "m_matmul": "matmul", "m_rmsnorm": "norm", "m_rope": "rope",
		"m_attention": "attention", "m_attn_split128": "attnf32", "m_add": "elementwise", "m_copy_words": "elementwise",
		"m_router_topk": "router", "m_moe_gateup": "moe", "moe_align": "moe", "m_gdn_chunk": "gdn", "m_gemv_bf16": "gemv",
		"fp8_gemv": "fp8", "m_pick": "sample", "m_pick_rows": "sample", "m_route_logits": "predict", "m_wait_host": "sync",
		"mla_attn": "mla", "mla_store": "mla", "m_router_group_topk": "router"} {
		if got, ok := names[want]; !ok || got != mod {
			t.Errorf("kernel %s found in module %q, want %q", want, got, mod)
		}
	}
	for name, n := range map[string]int{"m_attention": 13, "m_rmsnorm": 6, "m_pick": 4, "m_pick_rows": 4, "moe_align": 10} {
		if params[name] != n {
			t.Errorf("kernel %s: %d parameters counted, want %d", name, params[name], n)
		}
	}
	if src := mods["sample"]; !strings.Contains(src, fmt.Sprintf("#define PICK_GRID %d ", pickGrid)) {
		t.Errorf("sample.cu's PICK_GRID is not pickGrid (%d)", pickGrid)
	}
	for _, c := range []struct {
		def string
		val int
	}{{"MLA_FP8", wtMLAFP8}, {"MLA_TP", mlaTP}, {"MLA_RB", mlaRB}} {
		if !strings.Contains(mods["mla"], fmt.Sprintf("#define %s %d ", c.def, c.val)) {
			t.Errorf("mla.cu's %s is not mla.go's %d", c.def, c.val)
		}
	}
	for m, src := range mods {
		if !strings.Contains(src, "typedef unsigned short bf16") {
			t.Errorf("module %s lacks the common prelude", m)
		}
		if strings.Contains(src, "#include") {
			t.Errorf("module %s includes a header; NVRTC gets no include path", m)
		}
	}
}

// TestKernelsWaitForPredecessors checks that every kernel opens with
// KT_GRID_DEP, so that every launch may take the early (programmatic
// dependent) form, and that the index tells a kernel without it, which
// launch then starts the plain way.
func TestKernelsWaitForPredecessors(t *testing.T) {
	ix, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.names) < 50 {
		t.Fatalf("only %d kernels indexed", len(ix.names))
	}
	for name := range ix.names {
		if !ix.gridDep[name] {
			t.Errorf("kernel %s does not open with KT_GRID_DEP();", name)
		}
	}
	for _, c := range []struct {
		body string
		want bool
	}{
		{"{\n\tKT_GRID_DEP();\n\tint i = 0;", true},
		{"{ KT_GRID_DEP(); f(); }", true},

		{"{\n\tint i = threadIdx.x;\n\tKT_GRID_DEP();", false},
		{"{\n\t// KT_GRID_DEP();\n", false},
		{"{\n\tKT_GRID_DEP()\n", false},
	} {
		if got := gridDepRE.MatchString(c.body); got != c.want {
			t.Errorf("%q: opens with the wait = %v, want %v", c.body, got, c.want)
		}
	}
}

func TestCompileTargetAndCacheKey(t *testing.T) {
	if a, cubin := compileTarget(90, []int{75, 80, 86, 89, 90, 100}); a != "sm_90" || !cubin {
		t.Fatalf("sm 90: %s %v", a, cubin)
	}
	if a, cubin := compileTarget(120, []int{75, 80, 90, 100}); a != "compute_100" || cubin {
		t.Fatalf("sm 120 on an older NVRTC: %s %v", a, cubin)
	}
	k1 := cacheKey("norm", "src", nil, "sm_90", 13000, 13, 0)
	for _, k := range []string{
		cacheKey("norm", "src2", nil, "sm_90", 13000, 13, 0),
		cacheKey("norm", "src", []string{"-DX"}, "sm_90", 13000, 13, 0),
		cacheKey("norm", "src", nil, "sm_89", 13000, 13, 0),
		cacheKey("norm", "src", nil, "sm_90", 13010, 13, 0),
		cacheKey("norm", "src", nil, "sm_90", 13000, 13, 1),
	} {
		if k == k1 {
			t.Fatalf("cache key %s does not change with its inputs", k)
		}
	}
	if !strings.HasSuffix(cacheKey("m", "s", nil, "compute_100", 1, 1, 1), ".ptx") {
		t.Fatal("PTX targets should be cached as .ptx")
	}
}

func TestPackArgs(t *testing.T) {
	slots, err := packArgs([]any{Buffer{Ptr: 0x1234}, int(-1), int64(-2), float32(1.5), uint32(7)})
	if err != nil {
		t.Fatal(err)
	}
	if slots[0] != 0x1234 || slots[1] != 0xffffffff || slots[2] != ^uint64(1) || slots[3] != 0x3fc00000 || slots[4] != 7 {
		t.Fatalf("packed %x", slots)
	}
	if _, err := packArgs([]any{int(1) << 40}); err == nil {
		t.Fatal("int overflowing int32 accepted")
	}
	if _, err := packArgs([]any{"x"}); err == nil {
		t.Fatal("string argument accepted")
	}
}
