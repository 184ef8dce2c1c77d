package doctor

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ktserve/kt/internal/settings"
	"github.com/ktserve/kt/sysinfo"
)

var update = flag.Bool("update", false, "rewrite golden files")

// machine returns sysinfo for a synthetic 2-socket host.
func machine(isa sysinfo.ISA, thp string, memAvailKB int) *sysinfo.Info {
	fsys := fstest.MapFS{
		"proc/cpuinfo":                               {Data: []byte("vendor_id\t: GenuineIntel\nmodel name\t: Test Xeon 9999\nflags\t: avx2\n")},
		"proc/meminfo":                               {Data: []byte("MemTotal: 536870912 kB\nMemFree: 1000 kB\nMemAvailable: " + itoa(memAvailKB) + " kB\n")},
		"sys/devices/system/cpu/online":              {Data: []byte("0-3\n")},
		"sys/devices/system/node/node0/cpulist":      {Data: []byte("0-1\n")},
		"sys/devices/system/node/node0/meminfo":      {Data: []byte("Node 0 MemTotal: 268435456 kB\nNode 0 MemFree: 134217728 kB\n")},
		"sys/devices/system/node/node1/cpulist":      {Data: []byte("2-3\n")},
		"sys/devices/system/node/node1/meminfo":      {Data: []byte("Node 1 MemTotal: 268435456 kB\nNode 1 MemFree: 134217728 kB\n")},
		"sys/kernel/mm/transparent_hugepage/enabled": {Data: []byte(thp + "\n")},
	}
	for c := range 4 {
		fsys["sys/devices/system/cpu/cpu"+itoa(c)+"/topology/physical_package_id"] = &fstest.MapFile{Data: []byte(itoa(c / 2))}
		fsys["sys/devices/system/cpu/cpu"+itoa(c)+"/topology/core_id"] = &fstest.MapFile{Data: []byte(itoa(c % 2))}
	}
	info := sysinfo.Read(fsys, &isa)
	info.CPU.UsableCPUs = 4
	return info
}

func itoa(n int) string { return strconv.Itoa(n) }

var avx512VNNI = sysinfo.ISA{AVX2: true, FMA: true, F16C: true, AVX512F: true, AVX512BW: true, AVX512VL: true, AVX512VNNI: true}

func find(t *testing.T, rs []Result, name string) Result {
	t.Helper()
	for _, r := range rs {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no result %q in %v", name, rs)
	return Result{}
}

func runSections(env *Env, sections ...string) []Result {
	var cs []Check
	for _, c := range Checks() {
		for _, s := range sections {
			if strings.HasPrefix(c.Name, s+".") {
				cs = append(cs, c)
			}
		}
	}
	return Run(env, cs)
}

func TestMachineGolden(t *testing.T) {
	env := &Env{Sys: machine(avx512VNNI, "always [madvise] never", 400<<20)}
	rs := runSections(env, "cpu", "memory")
	var b bytes.Buffer
	if err := WriteText(&b, rs); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "machine.txt")
	if *update {
		os.MkdirAll("testdata", 0o755)
		os.WriteFile(golden, b.Bytes(), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("text output differs from %s:\n%s", golden, b.String())
	}
}

func TestMachineVerdicts(t *testing.T) {
	cases := []struct {
		name   string
		isa    sysinfo.ISA
		thp    string
		availK int
		check  string
		want   Status
		hint   string
	}{
		{"avx2 only", sysinfo.ISA{AVX2: true, FMA: true, F16C: true}, "[always]", 400 << 20, "cpu.isa", Warn, "AVX2 kernels"},
		{"avx2 kernel", sysinfo.ISA{AVX2: true, FMA: true, F16C: true}, "[always]", 400 << 20, "cpu.kernel", Warn, "avx2"},
		{"no avx2", sysinfo.ISA{}, "[always]", 400 << 20, "cpu.kernel", Warn, "generic"},
		{"avx512 vnni", avx512VNNI, "[always]", 400 << 20, "cpu.kernel", Pass, ""},
		{"no amx", avx512VNNI, "[always]", 400 << 20, "cpu.amx", Warn, "Sapphire Rapids"},
		{"thp never", avx512VNNI, "always madvise [never]", 400 << 20, "memory.thp", Warn, "echo madvise"},
		{"thp missing", avx512VNNI, "", 400 << 20, "memory.thp", Warn, "missing"},
		{"small ram", avx512VNNI, "[always]", 8 << 20, "memory.ram", Warn, "32 GiB"},
		{"big ram", avx512VNNI, "[always]", 400 << 20, "memory.ram", Pass, ""},
		{"numa hint", avx512VNNI, "[always]", 400 << 20, "cpu.numa.node0", Pass, "--kt-threadpool-count 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{Sys: machine(c.isa, c.thp, c.availK)}
			r := find(t, runSections(env, "cpu", "memory"), c.check)
			if r.Status != c.want || !strings.Contains(r.Hint+r.Detail, c.hint) {
				t.Errorf("%s: %s %q hint %q; want %s containing %q", c.check, r.Status, r.Detail, r.Hint, c.want, c.hint)
			}
		})
	}
}

const fixtures = "../testdata/models"

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(src, e.Name()))
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
	return dst
}

func TestModelChecks(t *testing.T) {
	t.Run("good", func(t *testing.T) {
		env := &Env{Sys: machine(avx512VNNI, "[always]", 400<<20), ModelPath: filepath.Join(fixtures, "qwen3next-b")}
		rs := runSections(env, "model")
		for _, name := range []string{"model.config", "model.generation", "model.weights", "model.disk", "model.fit"} {
			if r := find(t, rs, name); r.Status != Pass {
				t.Errorf("%s: %s %s", name, r.Status, r.Detail)
			}
		}
		if r := find(t, rs, "model.config"); !strings.Contains(r.Detail, "5 layers (4 MoE, 1 dense; 2 full attention, 3 linear), 8 experts top-2") {
			t.Errorf("config detail: %s", r.Detail)
		}
		if r := find(t, rs, "model.tokenizer"); r.Status != Warn {
			t.Errorf("tokenizer: %s", r.Status)
		}
	})
	t.Run("tokenizer files", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			files  []string
			status Status
			detail string
		}{
			{"tokenizer.json", []string{"tokenizer.json", "tokenizer_config.json"}, Pass, "tokenizer.json and tokenizer_config.json present"},
			{"tiktoken", []string{"tiktoken.model", "tokenizer_config.json"}, Pass, "tiktoken.model and tokenizer_config.json present"},
			{"no config", []string{"tiktoken.model"}, Warn, "missing tokenizer_config.json"},
			{"none", nil, Warn, "missing tokenizer.json (or Kimi-K2's tiktoken.model), tokenizer_config.json"},
		} {
			dir := t.TempDir()
			for _, f := range c.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			rs := checkTokenizer(&Env{ModelPath: dir})
			if len(rs) != 1 || rs[0].Status != c.status || rs[0].Detail != c.detail {
				t.Errorf("%s: %+v, want %s %q", c.name, rs, c.status, c.detail)
			}
		}
	})
	t.Run("does not fit", func(t *testing.T) {
		env := &Env{Sys: machine(avx512VNNI, "[always]", 0), ModelPath: filepath.Join(fixtures, "qwen3moe-a")}
		env.Sys.Memory.Available = 100 << 10 // 100 KiB: less than the fixture's 288 KiB of experts
		if r := find(t, runSections(env, "model"), "model.fit"); r.Status != Fail || !strings.Contains(r.Hint, "kt quant") {
			t.Errorf("fit: %s %s %s", r.Status, r.Detail, r.Hint)
		}
		env = &Env{Sys: machine(avx512VNNI, "[always]", 0), ModelPath: filepath.Join(fixtures, "qwen3moe-a")}
		env.Sys.Memory.Available = 320 << 10
		if r := find(t, runSections(env, "model"), "model.fit"); r.Status != Warn {
			t.Errorf("tight fit: %s %s", r.Status, r.Detail)
		}
	})
	t.Run("missing tensor", func(t *testing.T) {
		dir := copyDir(t, filepath.Join(fixtures, "qwen3moe-a"))
		cfg := filepath.Join(dir, "config.json")
		b, _ := os.ReadFile(cfg)
		os.WriteFile(cfg, bytes.Replace(b, []byte(`"num_hidden_layers": 3`), []byte(`"num_hidden_layers": 5`), 1), 0o644)
		env := &Env{Sys: machine(avx512VNNI, "[always]", 400<<20), ModelPath: dir}
		r := find(t, runSections(env, "model"), "model.weights")
		if r.Status != Fail || !strings.Contains(r.Detail, "66 problems") || !strings.Contains(r.Detail, "model.layers.3.input_layernorm.weight: missing") || !strings.Contains(r.Detail, "56 more") {
			t.Errorf("weights: %s %s", r.Status, r.Detail)
		}
	})
	t.Run("bad config", func(t *testing.T) {
		dir := copyDir(t, filepath.Join(fixtures, "qwen3moe-a"))
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["GPT2LMHeadModel"]}`), 0o644)
		env := &Env{Sys: machine(avx512VNNI, "[always]", 400<<20), ModelPath: dir}
		rs := runSections(env, "model")
		if r := find(t, rs, "model.config"); r.Status != Fail || !strings.Contains(r.Detail, "GPT2LMHeadModel") {
			t.Errorf("config: %s %s", r.Status, r.Detail)
		}
		if Worst(rs) != Fail {
			t.Error("worst is not fail")
		}
	})
	t.Run("MoE model kt does not serve", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["Glm4MoeForCausalLM"],"hidden_size":7168,
"moe_intermediate_size":2048,"n_routed_experts":256,"num_experts_per_tok":8,"num_hidden_layers":61}`), 0o644)
		env := &Env{Sys: machine(avx512VNNI, "[always]", 400<<20), ModelPath: dir}
		r := find(t, runSections(env, "model"), "model.config")
		if r.Status != Fail || !strings.Contains(r.Detail, "Glm4MoeForCausalLM") ||
			!strings.Contains(r.Hint, "routed experts (256 of 7168 x 2048, top-8) can still be converted (kt quant) and measured on this CPU (kt bench --type moe --model-path") {
			t.Errorf("config: %s %s; hint %s", r.Status, r.Detail, r.Hint)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		env := &Env{Sys: machine(avx512VNNI, "[always]", 400<<20), ModelPath: "/does/not/exist"}
		if r := find(t, runSections(env, "model"), "model.config"); r.Status != Fail {
			t.Errorf("config: %s %s", r.Status, r.Detail)
		}
	})
	t.Run("no model path", func(t *testing.T) {
		env := &Env{Sys: machine(avx512VNNI, "[always]", 400<<20)}
		if rs := runSections(env, "model"); len(rs) != 0 {
			t.Errorf("model results without --model-path: %v", rs)
		}
	})
}

func TestJSONAndPanics(t *testing.T) {
	env := &Env{Sys: machine(avx512VNNI, "[always]", 400<<20)}
	rs := Run(env, []Check{
		{"x.ok", func(*Env) []Result { return []Result{{Section: "x", Name: "x.ok", Status: Pass, Detail: "fine"}} }},
		{"x.boom", func(*Env) []Result { panic("boom") }},
	})
	if len(rs) != 2 || rs[1].Status != Fail || !strings.Contains(rs[1].Detail, "boom") {
		t.Fatalf("results = %+v", rs)
	}
	var b bytes.Buffer
	if err := WriteJSON(&b, rs); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Status  string
		Results []struct{ Name, Status, Detail string }
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status != "fail" || len(got.Results) != 2 || got.Results[0].Status != "pass" {
		t.Errorf("json = %s", b.String())
	}
}

// TestSettingsSection checks that the settings section lists every
// setting with its type, default, value and meaning, and never shows the
// API key.
func TestSettingsSection(t *testing.T) {
	t.Setenv(settings.CUDAPDL.Name, "0")
	t.Setenv(settings.APIKey.Name, "secret-key")
	t.Setenv(settings.CUDACache.Name, "")
	rs := runSections(&Env{}, "settings")
	all := settings.All()
	if len(rs) != len(all) {
		t.Fatalf("%d results for %d settings", len(rs), len(all))
	}
	for i, s := range all {
		r := rs[i]
		if r.Section != "settings" || r.Name != s.Name || r.Status != Pass {
			t.Errorf("result %d: %+v, want setting %s", i, r, s.Name)
		}
		for _, want := range []string{s.Type, s.Help} {
			if !strings.Contains(r.Detail, want) {
				t.Errorf("%s: detail %q lacks %q", s.Name, r.Detail, want)
			}
		}
		if r.Data["default"] != s.Default || r.Data["type"] != s.Type {
			t.Errorf("%s: data %v", s.Name, r.Data)
		}
	}
	for _, c := range []struct{ name, want string }{
		{settings.CUDAPDL.Name, `default 1, now "0"`},
		{settings.CUDACache.Name, "now unset"},
		{settings.APIKey.Name, "now set:"},
		{settings.RealShapes.Name, "[tests] bool"},
	} {
		if r := find(t, rs, c.name); !strings.Contains(r.Detail, c.want) {
			t.Errorf("%s: detail %q lacks %q", c.name, r.Detail, c.want)
		}
	}
	var b bytes.Buffer
	if err := WriteText(&b, rs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "secret-key") {
		t.Errorf("the API key is shown:\n%s", b.String())
	}
	var j bytes.Buffer
	if err := WriteJSON(&j, rs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(j.String(), "secret-key") {
		t.Errorf("the API key is in the JSON:\n%s", j.String())
	}
}

// TestModelTP checks model.tp: the sizes a model splits over without
// --tensor-parallel-size, what a rank holds at a size that divides, and
// the field that does not divide otherwise.
func TestModelTP(t *testing.T) {
	for _, c := range []struct {
		fixture string
		size    int
		status  Status
		detail  string
	}{
		{"qwen3moe-b", 0, Pass, "splits this model over 2, 4, 8 ranks"},
		{"qwen35moe-a", 1, Pass, "splits this model over 2 ranks"},
		{"qwen3moe-b", 4, Pass, "needs 4 GPUs (GPUs --base-gpu-id .. +3), or 4 CPU ranks with --device cpu; each rank holds 2 of 8 attention heads and 1 of 2 kv heads (replicated), 250 of 1000 vocabulary rows"},
		{"qwen3next-b", 2, Pass, "4 of 8 attention heads and 1 of 2 kv heads, 2 of 4 Gated DeltaNet key heads"},
		{"qwen35moe-a", 4, Fail, "linear_num_key_heads: 2 does not divide over tensor-parallel size 4"},
		{"qwen3moe-a", 3, Fail, "num_attention_heads: 4 does not divide over tensor-parallel size 3"},
	} {
		env := &Env{Sys: machine(avx512VNNI, "[always]", 400<<20), ModelPath: filepath.Join(fixtures, c.fixture), TPSize: c.size}
		if r := find(t, runSections(env, "model"), "model.tp"); r.Status != c.status || !strings.Contains(r.Detail, c.detail) {
			t.Errorf("%s at %d: %s %q, want %s containing %q", c.fixture, c.size, r.Status, r.Detail, c.status, c.detail)
		}
	}
}
