//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// kgroupAMXLevel is the level whose INT4_KGROUP prefill runs on AMX tiles
// here: real AMX where the CPU has it, else the emulation where it can run
// ("" where neither can).
func kgroupAMXLevel() ISA {
	f := DetectFeatures()
	switch {
	case f.AMX && !f.AMXDenied:
		return ISAAMX
	case emuAMX():
		return amxEmuLevel
	}
	return ""
}

// TestInt4KGroupAMXPrefill holds the AMX prefill of the group-wise int4
// panels (requantized to int8 panels with one scale per row as they are
// unpacked) to the AVX-512 VNNI kernels, which sum every group exactly and
// scale it by its own scale: same layer, same prefill batch, INT4_KGROUP
// with groups of 64 and 128 and RAWINT4 with groups of 32, whole K and in K
// pieces (AMXInt4Block) and slabs. The requantization adds at most half an
// int8 step of the row's largest group scale per weight; measured here
// ~1 % of the output, against INT4_KGROUP's int4 error of ~19 % (RAWINT4,
// exact codes, is held to its own bound instead).
func TestInt4KGroupAMXPrefill(t *testing.T) {
	amx := kgroupAMXLevel()
	if amx == "" || !DetectFeatures().VNNI {
		t.Skip("needs AMX, or AVX-512 with VNNI and BF16 for the emulation")
	}
	const topK, tokens = 4, 96 // ~24 tokens per expert: the prefill kernels
	for _, c := range []struct {
		m     Method
		group int
	}{{INT4KGroup, 64}, {INT4KGroup, 128}, {RAWINT4, 32}} {
		group := c.group
		spec := small
		spec.Method, spec.GroupSize, spec.Experts = c.m, group, 16
		src := sourceFor(c.m, spec)
		x, ids, w := RandomBatch(5, tokens, topK, spec.Hidden, spec.Experts)
		ref, err := Reference(src, spec, x, tokens, topK, ids, w, nil)
		if err != nil {
			t.Fatal(err)
		}
		run := func(isa ISA, i4, slab, pf int) ([]float32, string) {
			r, err := forwardOnce(withISA(Config{Threads: 3, MaxTokens: tokens, TopK: topK, AMXInt4Block: i4, AMXSlabBytes: int64(slab), AMXInt4Prefetch: pf,
				Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate}, isa), spec, src,
				Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w})
			if err != nil {
				t.Fatal(err)
			}
			return r.out, r.kernels
		}
		vec, kv := run(ISAAVX512, 0, -1, 0)
		calls := emuAMXCalls()
		tile, kt := run(amx, 0, -1, 0)
		if !strings.HasSuffix(kt, "amx prefill") && !strings.HasSuffix(kt, "amx-emulated prefill") {
			t.Fatalf("group %d: kernels %q, want an AMX prefill", group, kt)
		}
		if amx == amxEmuLevel && emuAMXCalls() == calls {
			t.Fatalf("group %d: the emulated AMX kernels were not called", group)
		}
		d, ev, ea := relErr(tile, vec), relErr(vec, ref), relErr(tile, ref)
		t.Logf("group %d: %s against %s: rel diff %.5f; rel err %.5f / %.5f", group, kt, kv, d, ea, ev)
		if !(d < 0.03) {
			t.Errorf("group %d: AMX prefill differs from the vector kernels by %.5f, want < 0.03", group, d)
		}
		if c.m == RAWINT4 && !(ea < maxErr[RAWINT4]) {
			t.Errorf("RAWINT4: AMX prefill error %.5f, want < %g", ea, maxErr[RAWINT4])
		}
		if c.m != RAWINT4 && !(ea < ev*1.01) {
			t.Errorf("group %d: AMX prefill error %.5f, vector %.5f: want within 1 %%", group, ea, ev)
		}
		// pieces, slabs and the unpack's prefetch run the same requantized
		// products: bitwise equal
		for _, c := range []struct{ i4, slab, pf int }{{2, -1, 0}, {0, 4096, 0}, {2, 4096, 0}, {0, -1, -1}, {2, 4096, 4096}} {
			got, _ := run(amx, c.i4, c.slab, c.pf)
			for i := range got {
				if got[i] != tile[i] {
					t.Fatalf("group %d, %s: element %d is %v, whole-K call %v", group, fmt.Sprintf("i4=%d slab=%d prefetch=%d", c.i4, c.slab, c.pf), i, got[i], tile[i])
				}
			}
		}
	}
}

// TestDecodePrefetchBitwise runs the decode kernels over packed panels
// (int8, int4, group-wise int4 in groups of 128 and 32, bf16), AVX2 and AVX-512, with their panel
// prefetch off, at the default distance and at one line: prefetches change
// no result, at one token or several per expert (40 tokens x top-4 over 16
// experts: up to a dozen each, so the kernels' multi-token passes run too).
func TestDecodePrefetchBitwise(t *testing.T) {
	const topK = 4
	for _, isa := range decodeISAs(t) {
		for _, m := range []Method{AMXINT8, AMXINT4, INT4KGroup, RAWINT4, AMXBF16} {
			decodePrefetchBitwise(t, isa, m, topK)
		}
	}
}

// decodeISAs is the vector ISAs whose decode kernels this CPU runs: AVX2,
// and AVX-512 where it has it (logged where not).
func decodeISAs(t *testing.T) []ISA {
	if !DetectFeatures().AVX512 {
		t.Log("no AVX-512: its kernels not run")
		return []ISA{ISAAVX2}
	}
	return []ISA{ISAAVX2, ISAAVX512}
}

func decodePrefetchBitwise(t *testing.T, isa ISA, m Method, topK int) {
	t.Helper()
	spec := small
	spec.Method = m
	src := sourceFor(m, spec)
	for _, tokens := range []int{1, 40} {
		x, ids, w := RandomBatch(9, tokens, topK, spec.Hidden, spec.Experts)
		var ref []float32
		for _, pf := range []int{-1, 0, 64} {
			run, err := forwardOnce(Config{ISA: isa, Threads: 3, MaxTokens: tokens, TopK: topK, DecodePrefetch: pf,
				Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate}, spec, src,
				Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w})
			if err != nil {
				t.Fatal(err)
			}
			out := run.out
			if ref == nil {
				ref = out
				continue
			}
			for i := range out {
				if out[i] != ref[i] {
					t.Fatalf("%s %s, %d tokens, prefetch %d: element %d is %v, without prefetch %v", isa, m, tokens, pf, i, out[i], ref[i])
				}
			}
		}
	}
}

// TestDecodeOneTokenMatchesPair holds the one-token loops of the integer
// decode kernels (their own loops: more chains, activations flipped once per
// block) to the kernels' several-token loops: a task of one token and a task
// of that token twice, routed the same, give the token the same bits, for
// AMXINT8, AMXINT4, INT4_KGROUP (groups of 64 and 128) and RAWINT4 (groups
// of 32 and 64) on AVX2 and AVX-512, at widths with an odd number of
// 128-column blocks.
func TestDecodeOneTokenMatchesPair(t *testing.T) {
	const topK = 4
	for _, isa := range decodeISAs(t) {
		for _, m := range []Method{AMXINT8, AMXINT4, INT4KGroup, RAWINT4} {
			for _, spec := range []LayerSpec{small, {Experts: 8, Hidden: 1152, Intermediate: 384}, {Experts: 8, Hidden: 512, Intermediate: 256, GroupSize: 64}} {
				if spec.GroupSize != 0 && m != INT4KGroup && m != RAWINT4 {
					continue
				}
				spec.Method = m
				src := sourceFor(m, spec)
				x, ids, w := RandomBatch(5, 1, topK, spec.Hidden, spec.Experts)
				cfg := Config{ISA: isa, Threads: 3, MaxTokens: 2, TopK: topK, Experts: spec.Experts, Hidden: spec.Hidden,
					Intermediate: spec.Intermediate}
				one, err := forwardOnce(cfg, spec, src, Batch{Tokens: 1, TopK: topK, X: x, IDs: ids, Weights: w})
				if err != nil {
					t.Fatal(err)
				}
				two, err := forwardOnce(cfg, spec, src, Batch{Tokens: 2, TopK: topK, X: append(x[:len(x):len(x)], x...),
					IDs: append(ids[:len(ids):len(ids)], ids...), Weights: append(w[:len(w):len(w)], w...)})
				if err != nil {
					t.Fatal(err)
				}
				for tok := range 2 {
					for i, v := range one.out {
						if got := two.out[tok*spec.Hidden+i]; got != v {
							t.Fatalf("%s %s %+v: token %d of two, element %d is %v, alone %v", isa, m, spec, tok, i, got, v)
						}
					}
				}
			}
		}
	}
}

// TestScale4ErrsVector holds the AVX-512 search for INT4_KGROUP's group
// scales to the scalar one, candidate scales and squared errors bit for
// bit, on groups of 64 and 128 values: Gaussian, with outliers, constant,
// all zero, tiny (below the vector form's 2^-100 floor), denormal-range
// (where candidates underflow) and values on rounding boundaries.
func TestScale4ErrsVector(t *testing.T) {
	if !DetectFeatures().AVX512 {
		t.Skip("needs AVX-512")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	groups := [][]float32{}
	for _, n := range []int{64, 128} {
		for range 400 {
			g := make([]float32, n)
			for i := range g {
				g[i] = float32(rng.NormFloat64())
			}
			groups = append(groups, g)
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(rng.NormFloat64() * 0.01)
		}
		out[n/3] = 5
		c := make([]float32, n)
		for i := range c {
			c[i] = 0.75
		}
		tiny := make([]float32, n)
		for i := range tiny {
			tiny[i] = float32(rng.NormFloat64()) * 0x1p-120
		}
		edge := make([]float32, n) // multiples of half an amax/7 step: rounding ties
		for i := range edge {
			edge[i] = float32(i%15-7) * 0.5
		}
		sub := make([]float32, n)
		sub[0] = 0x1p-148
		groups = append(groups, out, c, make([]float32, n), tiny, edge, sub)
	}
	for i, g := range groups {
		ss, se := scale4Errs(g, false)
		vs, ve := scale4Errs(g, true)
		if len(ss) != len(vs) {
			t.Fatalf("group %d (%d values): %d scalar candidates, %d vector", i, len(g), len(ss), len(vs))
		}
		for c := range ss {
			if math.Float32bits(ss[c]) != math.Float32bits(vs[c]) || math.Float32bits(se[c]) != math.Float32bits(ve[c]) {
				t.Fatalf("group %d (%d values), candidate %d: scalar %v (err %v), vector %v (err %v)", i, len(g), c, ss[c], se[c], vs[c], ve[c])
			}
		}
	}
	if s, _ := scale4Errs(groups[0], true); len(s) != 9 {
		t.Fatalf("%d candidates for a Gaussian group, want 9", len(s))
	}
}

// BenchmarkNewLayerQuantize times building a layer that quantizes at load
// (8 experts of the Qwen3.5 shape, from a random bf16 source, on every
// core): INT4_KGROUP's scale search against the per-row methods.
func BenchmarkNewLayerQuantize(b *testing.B) {
	for _, m := range []Method{AMXINT8, AMXINT4, INT4KGroup} {
		spec := LayerSpec{Method: m, Experts: 8, Hidden: 2048, Intermediate: 512}
		src := sourceFor(m, spec)
		e := newEngine(b, spec, 1, 2, 4, 8, ISAAuto)
		b.Run(string(m), func(b *testing.B) {
			for range b.N {
				l, err := e.NewLayer(spec, src)
				if err != nil {
					b.Fatal(err)
				}
				l.Close()
			}
		})
	}
}

// TestAMXInt4Fused holds the int4 AMX prefill with the unpack fused into the
// tile loop (Config.AMXInt4Fused) to the unpack-then-core path, bitwise:
// AMXINT4 and INT4_KGROUP (groups 64 and 128), an odd number of 128-column
// blocks (hidden 384), calls of 1-32 tokens (32-token chunks over ~70
// tokens per expert: full, 17-31 and under-16 blocks) and whole calls of
// several token blocks (threshold 512), with and without K slabs, the
// A-tile prefetch and the unpack's prefetch, in the phased task (the one
// with K slabs); and longer calls with the unpack fused into their first
// token block (Config.AMXInt4FusedFirst), the int8 core running the rest
// over the unpacked panels, with bf16 and f32 outputs alike. On the
// emulation it also checks that the fused kernel ran.
func TestAMXInt4Fused(t *testing.T) {
	amx := kgroupAMXLevel()
	if amx == "" || !DetectFeatures().VNNI {
		t.Skip("needs AMX, or AVX-512 with VNNI and BF16 for the emulation")
	}
	const topK, tokens = 4, 140 // 560 slots: a phased task
	for _, c := range []struct {
		m     Method
		group int
	}{{AMXINT4, 0}, {INT4KGroup, 64}, {INT4KGroup, 128}} {
		spec := LayerSpec{Method: c.m, Experts: 8, Hidden: 384, Intermediate: 256, GroupSize: c.group}
		src := sourceFor(c.m, spec)
		x, ids, w := RandomBatch(13, tokens, topK, spec.Hidden, spec.Experts)
		ids[7] = -1
		type knobs struct{ fused, first, chunk, slab, pf, i4pf int }
		run := func(k knobs) []float32 {
			r, err := forwardOnce(withISA(Config{Threads: 3, MaxTokens: tokens, TopK: topK, AMXInt4Fused: k.fused, AMXInt4FusedFirst: k.first,
				PrefillChunk: k.chunk, AMXSlabBytes: int64(k.slab), AMXPrefetch: k.pf, AMXInt4Prefetch: k.i4pf,
				Experts: spec.Experts, Hidden: spec.Hidden, Intermediate: spec.Intermediate}, amx), spec, src,
				Batch{Tokens: tokens, TopK: topK, X: x, IDs: ids, Weights: w})
			if err != nil {
				t.Fatal(err)
			}
			if r.phases.Phased != 1 {
				t.Fatalf("phase timers %+v: want one phased task", r.phases)
			}
			return r.out
		}
		ref := run(knobs{-1, -1, 0, -1, 0, -1}) // whole calls, unpacked first
		configs := []knobs{
			{0, 0, 32, -1, 0, -1}, {0, 0, 32, -1, 1, 0}, {0, 0, 32, 4096, 0, 2048}, {0, 0, 32, 20000, 2, 64}, {-1, -1, 32, 4096, 1, 0},
			{0, 0, 0, -1, 0, 0}, {512, 0, 0, -1, 0, 0}, {512, 0, 0, 4096, 1, 2048}, {512, 0, 64, 20000, 0, -1},
			{0, 1, 0, -1, 0, 0}, {0, 1, 0, 4096, 1, 2048}, {-1, 1, 64, 20000, 0, -1}, {0, 1, 0, 20000, 2, 0},
		}
		for _, k := range configs {
			calls := emuAMXFusedCalls()
			got := run(k)
			name := fmt.Sprintf("%s group %d, %+v", c.m, c.group, k)
			if amx == amxEmuLevel {
				ran := emuAMXFusedCalls() > calls
				if k.fused < 0 && k.first < 0 && ran || (k.chunk == 32 && k.fused == 0 || k.fused == 512 || k.first > 0) && !ran {
					t.Fatalf("%s: fused kernel ran: %v", name, ran)
				}
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("%s: element %d is %v, unfused whole calls %v", name, i, got[i], ref[i])
				}
			}
		}
	}
}
