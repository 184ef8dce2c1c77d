package cpuexperts

import (
	"fmt"
	"strings"

	"golang.org/x/sys/cpu"
)

// ISA is a kernel instruction-set level.
type ISA string

// ISA levels, from the floor every supported CPU has to AMX.
const (
	ISAAuto   ISA = "auto"
	ISAAVX2   ISA = "avx2"
	ISAAVX512 ISA = "avx512"
	ISAAMX    ISA = "amx"
)

// Features is what the CPU (and OS) offer to the kernels.
type Features struct {
	AVX2, AVX512, VNNI, AVX512BF16, AMX bool
	// AMXDenied is set when the CPU has AMX but the kernel refused the tile state.
	AMXDenied bool
}

// String lists the features, e.g. "avx2 avx512 vnni".
func (f Features) String() string {
	var s []string
	for _, x := range []struct {
		on   bool
		name string
	}{{f.AVX2, "avx2"}, {f.AVX512, "avx512"}, {f.VNNI, "avx512_vnni"}, {f.AVX512BF16, "avx512_bf16"}, {f.AMX, "amx"}} {
		if x.on {
			s = append(s, x.name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

// cpuFeatures reads CPUID; requestAMX is called when the CPU has AMX and
// returns whether the OS granted the tile state.
func cpuFeatures(requestAMX func() bool) Features {
	x := cpu.X86
	f := Features{
		AVX2:   x.HasAVX2 && x.HasFMA,
		AVX512: x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512DQ,
	}
	f.VNNI = f.AVX512 && x.HasAVX512VNNI
	f.AVX512BF16 = f.AVX512 && x.HasAVX512BF16
	if f.AVX512 && x.HasAMXTile && x.HasAMXInt8 && x.HasAMXBF16 {
		if requestAMX() {
			f.AMX = true
		} else {
			f.AMXDenied = true
		}
	}
	return f
}

// levels returns the ISA levels f supports, best first.
func (f Features) levels() []ISA {
	var l []ISA
	if f.AMX {
		l = append(l, ISAAMX)
	}
	if f.AVX512 {
		l = append(l, ISAAVX512)
	}
	if f.AVX2 {
		l = append(l, ISAAVX2)
	}
	return l
}

// bits returns the C capability bits allowed at level want ("auto" = best),
// or an error naming why the level cannot run here and what can.
func (f Features) bits(want ISA) (int, error) {
	if !f.AVX2 {
		return 0, fmt.Errorf("this CPU lacks AVX2+FMA, the minimum for kt's CPU expert kernels (found: %s); run the experts on the GPU instead", f)
	}
	if want == "" {
		want = ISAAuto
	}
	level := want
	if want == ISAAuto {
		level = f.levels()[0]
	}
	ok := false
	for _, l := range f.levels() {
		if l == level {
			ok = true
		}
	}
	if !ok {
		reason := fmt.Sprintf("this CPU has %s", f)
		if level == ISAAMX && f.AMXDenied {
			reason = "the kernel refused AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)"
		}
		alts := make([]string, 0, 3)
		for _, l := range f.levels() {
			alts = append(alts, string(l))
		}
		switch level {
		case ISAAVX2, ISAAVX512, ISAAMX:
			return 0, fmt.Errorf("kernel level %q is not available: %s; available: %s (or auto)", level, reason, strings.Join(alts, ", "))
		default:
			return 0, fmt.Errorf("unknown kernel level %q (known: auto, amx, avx512, avx2)", want)
		}
	}
	b := isaAVX2
	if level == ISAAVX512 || level == ISAAMX {
		b |= isaAVX512
		if f.VNNI {
			b |= isaVNNI
		}
		if f.AVX512BF16 {
			b |= isaBF16
		}
	}
	if level == ISAAMX {
		b |= isaAMX
	}
	return b, nil
}

// emuBits returns the C capability bits of an engine that runs as on an
// AMX CPU with its tile kernels emulated (Config.amxEmu, tests only): the
// bits an AMX CPU gives at level amx, plus isaAMXEmu. The decode kernels
// are then the AVX-512 VNNI and BF16 ones, which this CPU must have (every
// AMX CPU has them).
func (f Features) emuBits(want ISA) (int, error) {
	if want != "" && want != ISAAuto {
		return 0, fmt.Errorf("emulated AMX: kernel level %q given, want auto (the level is amx)", want)
	}
	if !f.AVX512 || !f.VNNI || !f.AVX512BF16 {
		return 0, fmt.Errorf("emulated AMX needs AVX-512 with VNNI and BF16 (the decode kernels of an AMX CPU); this CPU has %s", f)
	}
	return isaAVX2 | isaAVX512 | isaVNNI | isaBF16 | isaAMX | isaAMXEmu, nil
}

// C capability bits (kt_moe.h KT_ISA_*).
const (
	isaAVX2   = 1 << 0
	isaAVX512 = 1 << 1
	isaVNNI   = 1 << 2
	isaBF16   = 1 << 3
	isaAMX    = 1 << 4
	isaAMXEmu = 1 << 5 // tests only: the AMX tile kernels over emulated tiles
)

// tileFormat reports whether method m's prefill runs on real AMX tiles
// with these ISA bits (not the emulation), and whether its tile products
// are int8 (Method.intKernels) or bf16 (BF16, AMXBF16, FP8):
// the prefill choice describe names.
func tileFormat(m Method, bits int) (i8, ok bool) {
	if !amxPrefill(bits) || bits&isaAMXEmu != 0 {
		return false, false
	}
	return m.intKernels(), true
}

// amxPrefill reports whether the prefill runs on the AMX tile kernels (real
// or emulated) with these ISA bits: every method's does where AMX is.
func amxPrefill(bits int) bool { return bits&isaAMX != 0 }

// Describe names the kernels a method runs with the given capability bits,
// for logs and kt bench ("avx512-vnni decode, amx prefill").
func describe(m Method, bits int) string {
	dec := "avx2"
	if bits&isaAVX512 != 0 {
		dec = "avx512"
		switch {
		case m.intKernels() && bits&isaVNNI != 0:
			dec = "avx512-vnni"
		case (m == BF16 || m == AMXBF16 || m == FP8) && bits&isaBF16 != 0:
			dec = "avx512-bf16"
		}
	}
	pf := dec
	if amxPrefill(bits) {
		pf = "amx"
		if bits&isaAMXEmu != 0 {
			pf = "amx-emulated"
		}
	}
	return dec + " decode, " + pf + " prefill"
}
