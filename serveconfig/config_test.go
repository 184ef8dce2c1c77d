package serveconfig

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// seed003 is the launch line of seed 003 (Qwen3.5 on 4x RTX 4090).
var seed003 = strings.Fields(`--host 0.0.0.0 --port 30005 --model /path/to/qwen3.5
  --kt-weight-path /path/to/qwen3.5 --kt-cpuinfer 60 --kt-threadpool-count 2 --kt-num-gpu-experts 1
  --kt-method BF16 --attention-backend triton --trust-remote-code --mem-fraction-static 0.98
  --chunked-prefill-size 4096 --max-running-requests 32 --max-total-tokens 32000
  --served-model-name qwen3.5 --enable-mixed-chunk --tensor-parallel-size 4 --enable-p2p-check
  --disable-shared-experts-fusion --disable-custom-all-reduce`)

// seed000 is the LoRA launch line of seed 000.
var seed000 = strings.Fields(`--host 127.0.0.1 --port 30006 --model-path /m --tokenizer-path /m
  --kt-weight-path /w --kt-method AMXINT4 --kt-cpuinfer 60 --kt-threadpool-count 2 --kt-numa-nodes 0 1
  --kt-num-gpu-experts 0 --attention-backend flashinfer --trust-remote-code --mem-fraction-static 0.98
  --chunked-prefill-size 4096 --max-running-requests 2 --max-total-tokens 32000
  --served-model-name qwen3.5-kt-ft --enable-mixed-chunk --tensor-parallel-size 4 --enable-p2p-check
  --disable-cuda-graph --disable-custom-all-reduce --enable-lora --lora-backend triton
  --lora-paths qwen35b_neko=/path/to/adapter --log-level info`)

func TestParseSeedLines(t *testing.T) {
	c, err := Parse(seed003)
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelPath != "/path/to/qwen3.5" || c.TokenizerPath != c.ModelPath || c.Port != 30005 || c.Host != "0.0.0.0" {
		t.Errorf("model/tokenizer/host/port: %q %q %q %d", c.ModelPath, c.TokenizerPath, c.Host, c.Port)
	}
	if c.KTCPUInfer != 60 || c.KTThreadpoolCount != 2 || c.KTNumGPUExperts != 1 || c.KTMethod != "BF16" {
		t.Errorf("kt flags: %+v", c)
	}
	if c.MaxTotalTokens != 32000 || c.MaxRunningRequests != 32 || c.ChunkedPrefillSize != 4096 || !c.EnableMixedChunk {
		t.Errorf("engine flags: %+v", c)
	}
	if c.TensorParallelSize != 4 || c.ServedModelName != "qwen3.5" || c.MemFractionStatic != 0.98 {
		t.Errorf("gpu flags: %+v", c)
	}

	c, err = Parse(seed000)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.KTNumaNodes, []int{0, 1}) {
		t.Errorf("numa nodes %v", c.KTNumaNodes)
	}
	if len(c.LoRAPaths) != 1 || c.LoRAPaths[0] != (LoRAPath{"qwen35b_neko", "/path/to/adapter"}) {
		t.Errorf("lora paths %v", c.LoRAPaths)
	}
	if c.KTNumGPUExperts != 0 || !c.Set["kt-num-gpu-experts"] {
		t.Errorf("num gpu experts %d set=%v", c.KTNumGPUExperts, c.Set["kt-num-gpu-experts"])
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]string{"--model-path", "/m/"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Host != "127.0.0.1" || c.Port != 30000 || c.KTMethod != "AMXINT4" || c.KTThreadpoolCount != 2 ||
		c.KTExpertPlacementStrategy != "uniform" || c.InitExpertLocation != "trivial" || c.WatchdogTimeout != 300*time.Second ||
		c.TensorParallelSize != 1 || c.LogLevel != "info" || c.MaxLoRAsPerBatch != 8 || c.LoRABackend != "triton" ||
		c.MaxConnections != 256 || c.HTTPReadHeaderTimeout != 10*time.Second || c.HTTPReadTimeout != 60*time.Second ||
		c.HTTPWriteTimeout != 30*time.Second || c.HTTPIdleTimeout != 30*time.Second || c.MaxRequestBodyBytes != 32<<20 || c.MaxPromptBytes != 0 {
		t.Errorf("defaults: %+v", c)
	}
	if c.ModelName() != "/m" {
		t.Errorf("model name %q", c.ModelName())
	}
	if c.Addr() != "127.0.0.1:30000" {
		t.Errorf("addr %q", c.Addr())
	}
}

func TestParseForms(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		check func(*Config) bool
	}{
		{[]string{"--model=/m", "--tp-size=2"}, func(c *Config) bool { return c.TensorParallelSize == 2 }},
		{[]string{"--model", "/m", "--kt-threadpool-count=1", "--kt-numa-nodes=3"}, func(c *Config) bool { return slices.Equal(c.KTNumaNodes, []int{3}) }},
		{[]string{"--model", "/m", "--kt-threadpool-count", "3", "--kt-numa-nodes", "0", "1", "2"}, func(c *Config) bool { return slices.Equal(c.KTNumaNodes, []int{0, 1, 2}) }},
		{[]string{"--model", "/m", "--enable-lora", "--lora-paths", "a=/x", "b=/y,z"}, func(c *Config) bool {
			return len(c.LoRAPaths) == 2 && c.LoRAPaths[1].Path == "/y,z"
		}},
		{[]string{"--model_path", "/m", "--chunked_prefill_size", "-1"}, func(c *Config) bool { return c.ChunkedPrefillSize == -1 }},
		{[]string{"--model", "/m", "--watchdog-timeout", "2.5"}, func(c *Config) bool { return c.WatchdogTimeout == 2500*time.Millisecond }},
		{[]string{"--model", "/m", "--random-seed", "7"}, func(c *Config) bool { return c.RandomSeedSet && c.RandomSeed == 7 }},
		{[]string{"--model", "/m", "--http-idle-timeout", "0.5", "--http-write-timeout=120"}, func(c *Config) bool {
			return c.HTTPIdleTimeout == 500*time.Millisecond && c.HTTPWriteTimeout == 2*time.Minute
		}},
		{[]string{"--model", "/m", "--max-connections", "64", "--max-request-body-bytes", "1048576", "--max-prompt-bytes", "4096"}, func(c *Config) bool {
			return c.MaxConnections == 64 && c.MaxRequestBodyBytes == 1<<20 && c.MaxPromptBytes == 4096
		}},
		{[]string{"--model", "/m", "--max-batch-sequences", "8", "--max-response-bytes", "65536"}, func(c *Config) bool {
			return c.MaxBatchSequences == 8 && c.MaxResponseBytes == 65536
		}},
	} {
		c, err := Parse(tc.args)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if !tc.check(c) {
			t.Errorf("%v: parsed %+v", tc.args, c)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--model-path: required"},
		{[]string{"--model", "/m", "--port", "70000"}, "--port"},
		{[]string{"--model", "/m", "--port", "x"}, "port"},
		{[]string{"--model", "/m", "--no-such-flag"}, "no-such-flag"},
		{[]string{"--model", "/m", "extra"}, "unexpected argument"},
		{[]string{"--model", "/m", "--kt-numa-nodes"}, "--kt-numa-nodes: needs at least one value"},
		{[]string{"--model", "/m", "--kt-numa-nodes", "0", "1", "2"}, "--kt-threadpool-count is 2"},
		{[]string{"--model", "/m", "--kt-method", "AMXINT5"}, "--kt-method: \"AMXINT5\""},
		{[]string{"--model", "/m", "--kt-expert-placement-strategy", "best"}, "--kt-expert-placement-strategy"},
		{[]string{"--model", "/m", "--attention-backend", "magic"}, "--attention-backend"},
		{[]string{"--model", "/m", "--chunked-prefill-size", "0"}, "--chunked-prefill-size"},
		{[]string{"--model", "/m", "--mem-fraction-static", "1.5"}, "--mem-fraction-static"},
		{[]string{"--model", "/m", "--base-gpu-id", "-1"}, "--base-gpu-id: must not be negative"},
		{[]string{"--model", "/m", "--cuda-graph-max-bs", "-1"}, "--cuda-graph-max-bs: must not be negative"},
		{[]string{"--model", "/m", "--lora-paths", "a=/x"}, "needs --enable-lora"},
		{[]string{"--model", "/m", "--enable-lora", "--lora-paths", "a=/x", "a=/y"}, "given twice"},
		{[]string{"--model", "/m", "--enable-lora", "--lora-paths", "a:b=/x"}, "must not contain ':'"},
		{[]string{"--model", "/m", "--kt-enable-dynamic-expert-update"}, "--kt-gpu-prefill-token-threshold"},
		{[]string{"--model", "/m", "--watchdog-timeout", "0"}, "--watchdog-timeout"},
		{[]string{"--model", "/m", "--http-read-header-timeout", "0"}, "--http-read-header-timeout: must be positive"},
		{[]string{"--model", "/m", "--http-read-timeout", "-1"}, "--http-read-timeout: must be positive"},
		{[]string{"--model", "/m", "--http-write-timeout", "0"}, "--http-write-timeout: must be positive"},
		{[]string{"--model", "/m", "--http-idle-timeout", "0"}, "--http-idle-timeout: must be positive"},
		{[]string{"--model", "/m", "--max-connections", "0"}, "--max-connections: must be at least 1"},
		{[]string{"--model", "/m", "--max-request-body-bytes", "0"}, "--max-request-body-bytes: must be positive"},
		{[]string{"--model", "/m", "--max-prompt-bytes", "-1"}, "--max-prompt-bytes: must not be negative"},
		{[]string{"--model", "/m", "--max-batch-sequences", "0"}, "--max-batch-sequences: must be at least 1"},
		{[]string{"--model", "/m", "--max-response-bytes", "0"}, "--max-response-bytes: must be positive"},
		{[]string{"--model", "/m", "--log-level", "loud"}, "--log-level"},
		{[]string{"--model", "/m", "--reasoning-parser", "x"}, "--reasoning-parser"},
	} {
		_, err := Parse(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
	if _, err := Parse([]string{"--model", "/m", "--help"}); !errors.Is(err, ErrHelp) {
		t.Errorf("--help: %v", err)
	}
	if _, err := Parse([]string{"-h"}); !errors.Is(err, ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestValidateFeatures(t *testing.T) {
	cpuOnly := Features{CPUExpertMethods: []string{"BF16", "AMXINT4", "AMXINT8"}}
	// what kt serve declares in a cgo build (cpuexperts.Methods)
	engine := Features{CPUExpertMethods: []string{"BF16", "AMXBF16", "AMXINT8", "AMXINT4", "INT4_KGROUP", "FP8"}, Deferral: true}
	full := Features{GPUs: 4, MaxTensorParallel: 4, CPUExpertMethods: KTMethods, GPUExperts: true,
		Deferral: true, LayerwisePrefill: true, DynamicExpertUpdate: true, ExpertDistributionRecorder: true,
		PlacementStrategies: PlacementStrategies, LoRA: true, KTLoRA: true}
	for _, tc := range []struct {
		name    string
		args    []string
		f       Features
		refused []string // substrings of the error; none means accepted
		notes   []string // flags expected among the notices
	}{
		{"seed003 on a CPU-only machine", seed003, cpuOnly,
			[]string{"--kt-num-gpu-experts: GPU experts need a GPU"},
			[]string{"mem-fraction-static", "trust-remote-code", "attention-backend", "enable-p2p-check"}},
		{"seed003 with every feature", seed003, full, nil, []string{"trust-remote-code", "disable-shared-experts-fusion"}},
		{"seed000 without LoRA", seed000, cpuOnly, []string{"--enable-lora: LoRA serving is not implemented yet"}, nil},
		{"tp on the CPU", []string{"--model", "/m", "--device", "cpu", "--tp-size", "4"}, full, nil, nil},
		{"tp without a GPU", []string{"--model", "/m", "--tp-size", "2"}, cpuOnly, nil, nil},
		{"tp beyond the GPUs", []string{"--model", "/m", "--tp-size", "8"}, full, []string{"--tensor-parallel-size: 8 needs 8 GPUs; 4 found"}, nil},
		{"tp without NCCL", []string{"--model", "/m", "--tp-size", "2"}, Features{GPUs: 2, MaxTensorParallel: 1, TensorParallelWhy: "libnccl.so.2 not found"}, []string{"--tensor-parallel-size: tensor parallelism over 2 GPUs needs NCCL: libnccl.so.2 not found"}, nil},
		{"tp with deferral", []string{"--model", "/m", "--device", "cpu", "--tp-size", "2", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-max-deferred-experts-per-token", "1"}, engine, nil, nil},
		{"tp with GPU experts, deferral, layerwise prefill and dynamic update", []string{"--model", "/m", "--tp-size", "2", "--kt-weight-path", "/w", "--kt-method", "BF16",
			"--kt-num-gpu-experts", "4", "--kt-max-deferred-experts-per-token", "1", "--kt-gpu-prefill-token-threshold", "512", "--kt-enable-dynamic-expert-update"}, full, nil, nil},
		{"seed000 with LoRA", seed000, full, nil, []string{"lora-backend"}},
		{"cuda graph flags without a GPU", []string{"--model", "/m", "--disable-cuda-graph", "--cuda-graph-max-bs", "8"}, cpuOnly, nil,
			[]string{"disable-cuda-graph", "cuda-graph-max-bs"}},
		{"plain CPU", []string{"--model", "/m"}, cpuOnly, nil, nil},
		{"radix cache off", []string{"--model", "/m", "--disable-radix-cache", "--radix-eviction-policy", "lru"}, cpuOnly, nil, []string{"radix-eviction-policy"}},
		{"radix lfu", []string{"--model", "/m", "--radix-eviction-policy", "lfu"}, cpuOnly, []string{`--radix-eviction-policy: "lfu" is not implemented in kt`}, nil},
		{"kt flags without weights", []string{"--model", "/m", "--kt-cpuinfer", "8"}, cpuOnly, []string{"--kt-cpuinfer: has no effect without --kt-weight-path"}, nil},
		{"no CPU expert engine", []string{"--model", "/m", "--kt-weight-path", "/w"}, Features{}, []string{"--kt-method: AMXINT4: this kt has no CPU expert engine"}, nil},
		{"engine: every CPU flag that works", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-cpuinfer", "2",
			"--kt-threadpool-count", "1", "--kt-numa-nodes", "0", "--kt-num-gpu-experts", "0", "--kt-max-deferred-experts-per-token", "0",
			"--chunked-prefill-size", "64"}, engine, nil, nil},
		{"engine: kt's own method names", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "INT4_KGROUP"}, engine, nil, nil},
		{"engine: AMXBF16", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "AMXBF16"}, engine, nil, nil},
		{"engine: SGLang method it lacks", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "GPTQ_INT4"}, engine, []string{"--kt-method: GPTQ_INT4 is not implemented yet in kt; this build has BF16, AMXBF16"}, nil},
		{"engine: GPU experts on the CPU", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-num-gpu-experts", "4"}, engine, []string{"--kt-num-gpu-experts: GPU experts need a GPU", "--kt-num-gpu-experts 0"}, nil},
		{"engine: GPU experts, no hybrid step", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-num-gpu-experts", "4"}, Features{GPUs: 1, CPUExpertMethods: engine.CPUExpertMethods}, []string{"GPU-resident routed experts are not implemented yet"}, nil},
		{"engine: deferral", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-max-deferred-experts-per-token", "1"}, engine, nil, nil},
		{"engine: deferral without weights", []string{"--model", "/m", "--kt-max-deferred-experts-per-token", "1"}, engine, []string{"--kt-max-deferred-experts-per-token: has no effect without --kt-weight-path"}, nil},
		{"method missing", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "FP8"}, cpuOnly, []string{"FP8 is not implemented yet"}, nil},
		{"deferral missing", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-max-deferred-experts-per-token", "2"}, cpuOnly, []string{"--kt-max-deferred-experts-per-token: expert deferral is not implemented in this build"}, nil},
		{"gpu experts, feature missing", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-gpu-experts-ratio", "0.5"}, Features{GPUs: 1, CPUExpertMethods: []string{"BF16"}}, []string{"--kt-gpu-experts-ratio: GPU-resident routed experts are not implemented"}, nil},
		{"layerwise prefill without a GPU", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-gpu-prefill-token-threshold", "512"}, engine, []string{"--kt-gpu-prefill-token-threshold: layerwise GPU prefill needs a GPU"}, nil},
		{"layerwise prefill on --device cpu", []string{"--model", "/m", "--device", "cpu", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-gpu-prefill-token-threshold", "512"}, full, []string{"needs a GPU and none is in use"}, nil},
		{"layerwise prefill, hybrid step", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-gpu-prefill-token-threshold", "512"}, full, nil, nil},
		{"layerwise prefill, build without it", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-gpu-prefill-token-threshold", "512"}, Features{GPUs: 1, CPUExpertMethods: []string{"BF16"}}, []string{"layerwise GPU prefill is not in this build"}, nil},
		{"layerwise prefill without weights", []string{"--model", "/m", "--kt-gpu-prefill-token-threshold", "512"}, full, []string{"--kt-gpu-prefill-token-threshold: has no effect without --kt-weight-path"}, nil},
		{"dynamic update", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-num-gpu-experts", "2", "--kt-gpu-prefill-token-threshold", "512", "--kt-enable-dynamic-expert-update"}, full, nil, nil},
		{"dynamic update without GPU experts", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-gpu-prefill-token-threshold", "512", "--kt-enable-dynamic-expert-update"}, full, nil, []string{"kt-enable-dynamic-expert-update"}},
		{"dynamic update, build without it", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-num-gpu-experts", "2", "--kt-gpu-prefill-token-threshold", "512", "--kt-enable-dynamic-expert-update"}, Features{GPUs: 1, CPUExpertMethods: []string{"BF16"}, GPUExperts: true, LayerwisePrefill: true}, []string{"dynamic expert update is not in this build"}, nil},
		{"layerwise prefill with expert lora", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-gpu-prefill-token-threshold", "512", "--kt-expert-lora-path", "/l"}, full, []string{"--kt-gpu-prefill-token-threshold: cannot be used with KT expert LoRA"}, nil},
		{"dynamic update with expert lora", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-gpu-prefill-token-threshold", "512", "--kt-enable-dynamic-expert-update", "--kt-expert-lora-path", "/l"}, full, []string{"--kt-enable-dynamic-expert-update: cannot be used with KT expert LoRA"}, nil},
		{"cuda without gpu", []string{"--model", "/m", "--device", "cuda"}, cpuOnly, []string{"no usable GPU"}, nil},
		{"frequency without stats", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-num-gpu-experts", "2", "--kt-expert-placement-strategy", "frequency"}, full, []string{"--init-expert-location"}, nil},
		{"expert lora with gpu experts", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-num-gpu-experts", "2", "--kt-expert-lora-path", "/l"}, full, []string{"supports CPU experts only"}, nil},
		{"expert lora with one request", []string{"--model", "/m", "--kt-weight-path", "/w", "--kt-method", "BF16", "--kt-expert-lora-path", "/l", "--max-running-requests", "1"}, full, []string{"requires --max-running-requests >= 2"}, nil},
		{"base gpu id beyond the GPUs", []string{"--model", "/m", "--base-gpu-id", "1"}, Features{GPUs: 1}, []string{"--base-gpu-id: GPU 1 asked for but only 1 usable GPU(s) found"}, nil},
		{"base gpu id and tp beyond the GPUs", []string{"--model", "/m", "--base-gpu-id", "2", "--tp-size", "2"}, Features{GPUs: 3, MaxTensorParallel: 4}, []string{"--base-gpu-id: GPU 3 asked for"}, nil},
		{"base gpu id within the GPUs", []string{"--model", "/m", "--base-gpu-id", "1"}, Features{GPUs: 2}, nil, nil},
		{"base gpu id without a GPU", []string{"--model", "/m", "--base-gpu-id", "1"}, cpuOnly, nil, []string{"base-gpu-id"}},
		{"tp beyond build", []string{"--model", "/m", "--tp-size", "2"}, Features{GPUs: 2, MaxTensorParallel: 1}, []string{"needs NCCL"}, nil},
		{"expert recorder stat", []string{"--model", "/m", "--expert-distribution-recorder-mode", "stat", "--expert-distribution-recorder-buffer-size", "-1"}, Features{ExpertDistributionModes: []string{"stat"}}, nil, nil},
		{"expert recorder per_token", []string{"--model", "/m", "--expert-distribution-recorder-mode", "per_token"}, Features{ExpertDistributionModes: []string{"stat"}}, []string{"per_token is not implemented yet in kt (this build records: stat)"}, nil},
		{"expert recorder unknown mode", []string{"--model", "/m", "--expert-distribution-recorder-mode", "all"}, Features{ExpertDistributionModes: []string{"stat"}}, []string{`"all" is not one of`}, nil},
		{"expert recorder buffer 0", []string{"--model", "/m", "--expert-distribution-recorder-mode", "stat", "--expert-distribution-recorder-buffer-size", "0"}, Features{ExpertDistributionModes: []string{"stat"}}, []string{"buffer-size: 0"}, nil},
		{"expert recorder missing", []string{"--model", "/m", "--expert-distribution-recorder-mode", "stat"}, cpuOnly, []string{"this build records: none"}, nil},
	} {
		c, err := Parse(tc.args)
		if err != nil {
			t.Fatalf("%s: parse: %v", tc.name, err)
		}
		notes, err := c.Validate(tc.f)
		if len(tc.refused) == 0 && err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
		for _, want := range tc.refused {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %v, want it to contain %q", tc.name, err, want)
			}
		}
		for _, flag := range tc.notes {
			if !slices.ContainsFunc(notes, func(n Notice) bool { return n.Flag == flag }) {
				t.Errorf("%s: no notice for --%s in %v", tc.name, flag, notes)
			}
		}
	}
}

func TestUsageGolden(t *testing.T) {
	got := Usage()
	path := filepath.Join("testdata", "usage.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("usage changed; run go test ./serveconfig -update and review the diff\n%s", got)
	}
	// Every SGLang flag kt takes appears in the help.
	for _, f := range []string{"host", "port", "model-path", "tokenizer-path", "served-model-name", "trust-remote-code",
		"tensor-parallel-size", "base-gpu-id", "mem-fraction-static", "chunked-prefill-size", "max-running-requests", "max-total-tokens",
		"enable-mixed-chunk", "attention-backend", "disable-cuda-graph", "enable-p2p-check", "disable-custom-all-reduce",
		"disable-shared-experts-fusion", "log-level", "skip-tokenizer-init", "api-key", "context-length", "watchdog-timeout",
		"kt-weight-path", "kt-method", "kt-cpuinfer", "kt-threadpool-count", "kt-numa-nodes", "kt-num-gpu-experts",
		"kt-gpu-experts-ratio", "kt-max-deferred-experts-per-token", "kt-gpu-prefill-token-threshold",
		"kt-enable-dynamic-expert-update", "kt-expert-placement-strategy", "record-kt-gpu-expert-distribution",
		"kt-lora-path", "kt-expert-lora-path", "init-expert-location", "enable-lora", "lora-paths", "lora-backend",
		"disable-radix-cache", "radix-eviction-policy", "enable-cache-report"} {
		if !strings.Contains(got, "--"+f+" ") && !strings.Contains(got, "--"+f+"\n") {
			t.Errorf("help lacks --%s", f)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(strings.Join(seed003, "\x00"))
	f.Add(strings.Join(seed000, "\x00"))
	f.Add("--model\x00/m\x00--kt-numa-nodes\x00--lora-paths=\x00")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(strings.Split(s, "\x00"))
		if err == nil {
			_, _ = c.Validate(Features{})
		}
	})
}

func TestServerArgs(t *testing.T) {
	c, err := Parse(append(slices.Clone(seed000), "--api-key", "secret", "--incremental-streaming-output"))
	if err != nil {
		t.Fatal(err)
	}
	args := c.ServerArgs()
	for _, tc := range []struct {
		key  string
		want any
	}{
		{"model_path", "/m"},
		{"tokenizer_path", "/m"},
		{"served_model_name", "qwen3.5-kt-ft"},
		{"tp_size", 4},
		{"port", 30006},
		{"max_total_tokens", 32000},
		{"mem_fraction_static", 0.98},
		{"enable_mixed_chunk", true},
		{"stream_output", true},
		{"watchdog_timeout", 300.0},
		{"kt_method", "AMXINT4"},
		{"kt_numa_nodes", []int{0, 1}},
		{"lora_paths", map[string]string{"qwen35b_neko": "/path/to/adapter"}},
	} {
		got, ok := args[tc.key]
		if !ok || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s = %v (present %v), want %v", tc.key, got, ok, tc.want)
		}
	}
	if _, ok := args["api_key"]; ok {
		t.Error("the API key is reported")
	}
	if _, ok := args["tensor_parallel_size"]; ok {
		t.Error("tp_size reported under the flag's name too")
	}
	if (&Config{}).ServerArgs() != nil {
		t.Error("an unparsed Config reports args")
	}
}
