// Package sysinfo describes the machine kt runs on: the CPU's model and
// instruction sets (and whether the OS lets this process use AMX), cores
// and threads, NUMA nodes, memory, transparent huge pages and disk space.
// Everything is read from CPUID (golang.org/x/sys/cpu), /proc and /sys;
// readers take an fs.FS rooted at "/" so tests can feed synthetic trees.
package sysinfo

import (
	"strings"

	"golang.org/x/sys/cpu"
)

// ISA lists the instruction-set extensions kt's kernels care about. A flag
// is true only if the CPU has it and the OS saves its register state (for
// AVX and AVX-512, per XCR0; AMX additionally needs a per-process grant,
// see RequestAMX).
type ISA struct {
	AVX2, FMA, F16C bool
	AVXVNNI         bool // VEX-encoded VNNI (Alder Lake and later)
	AVX512F         bool
	AVX512BW        bool
	AVX512VL        bool
	AVX512DQ        bool
	AVX512VNNI      bool
	AVX512VBMI      bool
	AVX512BF16      bool
	AVX512FP16      bool
	AMXTile         bool
	AMXInt8         bool
	AMXBF16         bool
}

// DetectISA reads the current CPU's features. cpuinfoFlags, when not nil,
// supplies flags x/sys/cpu does not decode (avx512_fp16), as listed on the
// "flags" line of /proc/cpuinfo.
func DetectISA(cpuinfoFlags []string) ISA {
	x := cpu.X86
	isa := ISA{
		AVX2:       x.HasAVX2,
		FMA:        x.HasFMA,
		F16C:       x.HasF16C,
		AVXVNNI:    x.HasAVXVNNI,
		AVX512F:    x.HasAVX512F && x.HasAVX512,
		AVX512BW:   x.HasAVX512BW && x.HasAVX512,
		AVX512VL:   x.HasAVX512VL && x.HasAVX512,
		AVX512DQ:   x.HasAVX512DQ && x.HasAVX512,
		AVX512VNNI: x.HasAVX512VNNI && x.HasAVX512,
		AVX512VBMI: x.HasAVX512VBMI && x.HasAVX512,
		AVX512BF16: x.HasAVX512BF16 && x.HasAVX512,
		AMXTile:    x.HasAMXTile,
		AMXInt8:    x.HasAMXInt8,
		AMXBF16:    x.HasAMXBF16,
	}
	for _, f := range cpuinfoFlags {
		if f == "avx512_fp16" {
			isa.AVX512FP16 = x.HasAVX512
		}
	}
	return isa
}

// Kernel variants, best first. Each names the ISA level of the CPU expert
// kernels that run on a machine.
const (
	VariantAMX        = "amx"         // AMX tiles (BF16 and INT8), needs the OS grant
	VariantAVX512BF16 = "avx512-bf16" // AVX-512 with VDPBF16PS
	VariantAVX512VNNI = "avx512-vnni" // AVX-512 with VPDPBUSD for INT8/INT4
	VariantAVX512     = "avx512"      // AVX-512 F/BW/VL
	VariantAVX2       = "avx2"        // AVX2 + FMA + F16C
	VariantGeneric    = "generic"     // portable Go / C
)

// KernelVariant returns the best kernel variant isa supports; amxGranted
// says whether the OS granted this process AMX tile state.
func (isa ISA) KernelVariant(amxGranted bool) string {
	avx512 := isa.AVX512F && isa.AVX512BW && isa.AVX512VL
	switch {
	case avx512 && isa.AMXTile && isa.AMXBF16 && isa.AMXInt8 && amxGranted:
		return VariantAMX
	case avx512 && isa.AVX512BF16:
		return VariantAVX512BF16
	case avx512 && isa.AVX512VNNI:
		return VariantAVX512VNNI
	case avx512:
		return VariantAVX512
	case isa.AVX2 && isa.FMA && isa.F16C:
		return VariantAVX2
	}
	return VariantGeneric
}

// Names lists the flags that are set, in a fixed order, by their
// /proc/cpuinfo spelling.
func (isa ISA) Names() []string {
	var out []string
	add := func(b bool, n string) {
		if b {
			out = append(out, n)
		}
	}
	add(isa.AVX2, "avx2")
	add(isa.FMA, "fma")
	add(isa.F16C, "f16c")
	add(isa.AVXVNNI, "avx_vnni")
	add(isa.AVX512F, "avx512f")
	add(isa.AVX512BW, "avx512bw")
	add(isa.AVX512VL, "avx512vl")
	add(isa.AVX512DQ, "avx512dq")
	add(isa.AVX512VNNI, "avx512_vnni")
	add(isa.AVX512VBMI, "avx512vbmi")
	add(isa.AVX512BF16, "avx512_bf16")
	add(isa.AVX512FP16, "avx512_fp16")
	add(isa.AMXTile, "amx_tile")
	add(isa.AMXInt8, "amx_int8")
	add(isa.AMXBF16, "amx_bf16")
	return out
}

// String lists the set flags separated by spaces.
func (isa ISA) String() string { return strings.Join(isa.Names(), " ") }
