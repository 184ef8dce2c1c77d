// Package settings declares every environment variable kt reads: its name,
// type, default and one-line meaning. Code reads a setting only through the
// typed value declared here, so `kt doctor` can list them all with the
// values in effect, and a malformed value is refused with the variable's
// name instead of being ignored.
package settings

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Scope says who a setting is for.
type Scope string

// The scopes of the settings.
const (
	User  Scope = "user"  // users of the kt commands
	Tests Scope = "tests" // the test suite and its benchmarks
)

// Info describes one setting for listings (`kt doctor`).
type Info struct {
	Name    string // the environment variable
	Default string // the value in effect when the variable is unset
	Type    string // "string", "bool", "duration", "int", "enum", "paths"
	Help    string // one line: what it changes
	Scope   Scope
}

// Value is the value of the variable now, "" when unset.
func (i Info) Value() string { return os.Getenv(i.Name) }

// String is a setting holding free text.
type String struct{ Info }

// Get returns the variable's value, or the default when unset or empty.
func (s String) Get() string {
	if v := os.Getenv(s.Name); v != "" {
		return v
	}
	return s.Default
}

// Paths is a setting holding a list of directories separated by the
// system's list separator (":" on Linux).
type Paths struct{ Info }

// Get returns the directories named, in order; none when unset.
func (p Paths) Get() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv(p.Name)) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// Bool is an on/off setting: 1/true/on or 0/false/off.
type Bool struct{ Info }

// Get returns the setting's value, its default when unset, or an error
// naming the variable when the value is not a boolean.
func (b Bool) Get() (bool, error) {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(b.Name)))
	if v == "" {
		v = b.Default
	}
	switch v {
	case "1", "true", "on", "yes":
		return true, nil
	case "0", "false", "off", "no":
		return false, nil
	}
	return false, fmt.Errorf("%s=%q: want 1 or 0", b.Name, os.Getenv(b.Name))
}

// Duration is a setting holding a non-negative Go duration ("300us").
type Duration struct{ Info }

// Get returns the duration, the default when unset (0 for an empty
// default: the caller's own), or an error naming the variable.
func (d Duration) Get() (time.Duration, error) {
	v := strings.TrimSpace(os.Getenv(d.Name))
	if v == "" {
		v = d.Default
	}
	if v == "" {
		return 0, nil
	}
	x, err := time.ParseDuration(v)
	if err != nil || x < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 300us", d.Name, v)
	}
	return x, nil
}

// Int is a setting holding a whole number within [Min, Max].
type Int struct {
	Info
	Min, Max int
}

// Get returns the number, the default when unset, or an error naming the
// variable and the range.
func (n Int) Get() (int, error) {
	v := strings.TrimSpace(os.Getenv(n.Name))
	if v == "" {
		v = n.Default
	}
	if v == "" {
		return 0, nil
	}
	x, err := strconv.Atoi(v)
	if err != nil || x < n.Min || x > n.Max {
		return 0, fmt.Errorf("%s=%q: want a whole number from %d to %d", n.Name, v, n.Min, n.Max)
	}
	return x, nil
}

// Enum is a setting holding one of a fixed list of words.
type Enum struct {
	Info
	Values []string
}

// Get returns the value (lower-cased), the default when unset, or an
// error naming the variable and the accepted values.
func (e Enum) Get() (string, error) {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(e.Name)))
	if v == "" {
		return e.Default, nil
	}
	if !slices.Contains(e.Values, v) {
		return "", fmt.Errorf("%s=%q: want one of %s", e.Name, v, strings.Join(e.Values, ", "))
	}
	return v, nil
}

// The settings. Each is declared once, here.
var (
	// APIKey is kt chat's default --api-key.
	APIKey = String{Info{"KT_API_KEY", "", "string", "default --api-key of kt chat and kt bench", User}}

	// CUDALibDirs are searched first for the CUDA libraries.
	CUDALibDirs = Paths{Info{"KT_CUDA_LIB_DIR", "", "paths", "directories searched first for libcuda, libcublasLt, libnvrtc and libnccl", User}}

	// CUDACache is where compiled GPU kernels are cached.
	CUDACache = String{Info{"KT_CUDA_CACHE", "", "string", "directory of the compiled-kernel cache (default <user cache dir>/kt/cuda)", User}}

	// CUDAPDL turns programmatic dependent launch off, for drivers that
	// mishandle it.
	CUDAPDL = Bool{Info{"KT_CUDA_PDL", "1", "bool", "0: launch kernels the plain way (a workaround for a driver that mishandles programmatic dependent launch on sm_90+)", User}}

	// HybridTiming times the hybrid step's hand-offs and traces the CPU
	// expert tasks.
	HybridTiming = Bool{Info{"KT_HYBRID_TIMING", "0", "bool", "1: time the hybrid step's hand-offs and CPU expert tasks; kt generate prints them, kt serve logs them at exit", User}}

	// ExpertSpinWait is how long idle CPU expert threads spin before they
	// sleep.
	ExpertSpinWait = Duration{Info{"KT_CPUEXPERTS_SPIN_WAIT", "", "duration", "how long idle CPU expert threads spin before sleeping (default 1.5ms beside a GPU, 0.5ms on the CPU backend); lower it to share the cores", User}}

	// ExpertISA caps the CPU expert kernels' instruction set.
	ExpertISA = Enum{Info{"KT_CPUEXPERTS_ISA", "auto", "enum", "cap the CPU expert kernels' instruction set: auto, amx, avx512, avx2", User}, []string{"auto", "amx", "avx512", "avx2"}}

	// LayerwiseBuffers is the number of shadow layer buffers of layerwise
	// GPU prefill.
	LayerwiseBuffers = Int{Info{"KT_LAYERWISE_BUFFERS", "2", "int", "shadow layer buffers of layerwise prefill: 2 overlaps the next upload, 1 halves their VRAM", User}, 1, 2}

	// ExpertDistDir is where the expert-distribution recorder writes
	// (SGLang's variable).
	ExpertDistDir = String{Info{"SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", "", "string", "directory of expert-distribution dumps (default: the system's temporary directory)", User}}

	// TestdataModels is where the transformers fixtures are.
	TestdataModels = String{Info{"KT_TESTDATA_MODELS", "", "string", "directory of the transformers fixtures (default testdata/models above go.mod)", Tests}}

	// SynthOut makes TestMakeSynthetic write a synthetic full-width
	// checkpoint there.
	SynthOut = String{Info{"KT_SYNTH_OUT", "", "string", "TestMakeSynthetic writes a synthetic full-width checkpoint to this directory", Tests}}

	// SynthLayers is the number of layers of that checkpoint.
	SynthLayers = Int{Info{"KT_SYNTH_LAYERS", "", "int", "layers of the synthetic checkpoint (default: the test's)", Tests}, 1, 1 << 10}

	// SynthDir is a synthetic checkpoint the decode benchmarks run.
	SynthDir = String{Info{"KT_SYNTH_DIR", "", "string", "synthetic checkpoint that BenchmarkDecodeSynthetic runs", Tests}}

	// RealShapes runs the CPU expert accuracy tests at real model shapes.
	RealShapes = Bool{Info{"KT_TEST_REAL_SHAPES", "0", "bool", "1: run the CPU expert accuracy tests at real model shapes (slow)", Tests}}
)

// All lists every setting, users' first, for `kt doctor`.
func All() []Info {
	return []Info{
		APIKey.Info, CUDALibDirs.Info, CUDACache.Info, CUDAPDL.Info, HybridTiming.Info,
		ExpertSpinWait.Info, ExpertISA.Info, LayerwiseBuffers.Info, ExpertDistDir.Info,
		TestdataModels.Info, SynthOut.Info, SynthLayers.Info, SynthDir.Info, RealShapes.Info,
	}
}
