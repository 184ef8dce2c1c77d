//go:build linux && amd64 && cgo

package cpuexperts

import (
	"fmt"
	"math"
	"testing"
)

// TestAMXCoreEmulated runs the AMX prefill kernel body (kern_amx_core.h)
// over emulated tiles, so its loop structure, addressing and knobs are
// tested on CPUs without AMX: every shape is checked against a float64
// reference, and every knob setting (K block, L1 tile prefetch and which
// tiles, the next-call L2 prefetch, non-temporal C, tile-order or row-major
// activations) must give bitwise the result of the plain setting.
func TestAMXCoreEmulated(t *testing.T) {
	if !DetectFeatures().AVX512 {
		t.Skip("the emulated kernel's epilogue needs AVX-512F")
	}
	knobs := []amxKnobs{
		{kch: -1, pf: 0, pfm: 3, tiled: true}, // the reference setting
		{kch: -1, pf: 1, pfm: 3, nxl: 4, tiled: true},
		{kch: 1, pf: 2, pfm: 1, nxl: 64, tiled: true, nt: true},
		{kch: 3, pf: 1, pfm: 2, nxl: 1, tiled: false},
		{kch: 2, pf: 0, pfm: 3, nxl: 0, tiled: false, nt: true},
	}
	shapes := [][3]int{{1, 192, 16}, {17, 256, 32}, {40, 192, 32}, {64, 128, 16}, {100, 384, 32}}
	if testing.Short() {
		shapes = shapes[:3]
	}
	for _, i8 := range []bool{false, true} {
		tol := 1e-5
		if i8 {
			tol = 1e-6 // integer sums are exact; the scale products round
		}
		for _, sh := range shapes {
			m, k, nn := sh[0], sh[1], sh[2]
			var ref []float32
			for _, kn := range knobs {
				name := fmt.Sprintf("i8=%v/m=%d/k=%d/nn=%d/%+v", i8, m, k, nn, kn)
				out, e, err := emuAMXRun(i8, m, k, nn, kn)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if e > tol {
					t.Errorf("%s: error %.3g against the float64 reference, want <= %g", name, e, tol)
				}
				if ref == nil {
					ref = out
					continue
				}
				for j := range ref {
					if math.Float32bits(ref[j]) != math.Float32bits(out[j]) {
						t.Fatalf("%s: C[%d] = %g, the plain setting gives %g", name, j, out[j], ref[j])
					}
				}
			}
		}
	}
	if _, _, err := emuAMXRun(false, 8, 100, 16, amxKnobs{}); err == nil {
		t.Error("k = 100 (not a multiple of 64) accepted")
	}
}

// TestAMXInt4GroupEmulated runs the group-wise int4 AMX kernel (panels of
// unsigned codes, each unpacked to 16v as a signed byte and requantized to
// one int8 scale per row) over emulated tiles, for groups of 32, 64 and 128
// whose scales differ within a row, with the unpack of whole panels and the
// one fused into the tile loop: against the panels' own int4 values only
// the requantization (half an int8 step of the row's largest group scale a
// weight) is left, and the two unpacks give the same bits.
func TestAMXInt4GroupEmulated(t *testing.T) {
	f := DetectFeatures()
	if !f.AVX512 {
		t.Skip("the emulated kernel needs AVX-512F and BW")
	}
	for _, group := range []int{32, 64, 128} {
		for _, sh := range [][3]int{{1, 256, 16}, {17, 384, 32}, {40, 128, 16}} {
			m, k, nn := sh[0], sh[1], sh[2]
			var outs [2][]float32
			for i, fused := range []bool{false, true} {
				out, e, err := emuAMXI4GRun(m, k, nn, group, fused)
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("group %d m=%d k=%d nn=%d fused=%v", group, m, k, nn, fused)
				t.Logf("%s: error %.3g", name, e)
				if !(e < 0.01) {
					t.Errorf("%s: error %.3g against the int4 values, want < 0.01", name, e)
				}
				outs[i] = out
			}
			for j := range outs[0] {
				if math.Float32bits(outs[0][j]) != math.Float32bits(outs[1][j]) {
					t.Fatalf("group %d m=%d k=%d: C[%d] = %g fused, %g unpacked whole", group, m, k, j, outs[1][j], outs[0][j])
				}
			}
		}
	}
}

// BenchmarkAMXKernel times the AMX prefill kernels alone on one core (its
// weights resident in L2), on half and on all physical cores (the engine's
// pinning), each thread of the latter streaming
// 48 MiB of its own weights (all threads together exceed the last-level
// cache, as a layer's experts do) over one expert's activations: 256 tokens
// at K 2048 (gate/up of Qwen3-30B at 4096 tokens) and K 768 (its down
// projection). Sub-benchmarks sweep the result-neutral knobs; the metric is
// TFLOPS of all threads together. On hosts whose all-core tile rate is far
// below the per-core one, the all-core runs only show that ceiling; the
// half-core runs show which loop structure hides the tile loads' latency.
// Needs AMX (skipped elsewhere):
//
//	moe.test -test.run XXX -test.bench AMXKernel -test.benchtime 1x
func BenchmarkAMXKernel(b *testing.B) {
	if !DetectFeatures().AMX {
		b.Skip("no AMX")
	}
	cpus := WorkerCPUs(PhysicalCores())
	type cfg struct {
		name string
		kn   amxKnobs
	}
	cfgs := []cfg{
		{"base", amxKnobs{kch: -1, pf: 1, pfm: 3, nxl: 0}},
		{"nx4", amxKnobs{kch: -1, pf: 1, pfm: 3, nxl: 4}},
		{"nopf", amxKnobs{kch: -1, pf: 0, pfm: 3, nxl: 4}},
		{"pfA", amxKnobs{kch: -1, pf: 1, pfm: 1, nxl: 4}},
		{"pfB", amxKnobs{kch: -1, pf: 1, pfm: 2, nxl: 4}},
		{"pfB2", amxKnobs{kch: -1, pf: 2, pfm: 2, nxl: 4}},
		{"pf2", amxKnobs{kch: -1, pf: 2, pfm: 3, nxl: 4}},
		{"pf4", amxKnobs{kch: -1, pf: 4, pfm: 3, nxl: 4}},
		{"kb8", amxKnobs{kch: 8, pf: 1, pfm: 3, nxl: 4}},
		{"kb8pfA", amxKnobs{kch: 8, pf: 1, pfm: 1, nxl: 4}},
		{"kb8nopf", amxKnobs{kch: 8, pf: 0, pfm: 3, nxl: 4}},
		{"kb16pfA", amxKnobs{kch: 16, pf: 1, pfm: 1, nxl: 4}},
		{"kb4pfA", amxKnobs{kch: 4, pf: 1, pfm: 1, nxl: 4}},
		{"kb8pf2A", amxKnobs{kch: 8, pf: 2, pfm: 1, nxl: 4}},
	}
	// The tile unit alone (variants -1: operands resident, -2: reloaded from
	// L1 every round): the ceiling the kernels below are measured against;
	// -3/-5: the L1-reload tile block with 8/4 tokens of AVX-512 dot products
	// in the same instruction stream, -4: those 8 tokens alone (do the vector
	// units add to the tile unit on one core?).
	for _, i8 := range []bool{false, true} {
		for _, v := range []int{-1, -2, -3, -4, -5} {
			// 1 .. all worker cores: does the per-core rate hold as cores are added?
			var sets [][]int
			for _, n := range []int{1, 2, 4, 8, 12} {
				if n < len(cpus) && (n == 1 || v > -3) {
					sets = append(sets, cpus[:n])
				}
			}
			for _, cs := range append(sets, cpus) {
				b.Run(fmt.Sprintf("i8=%v/peak%d/threads=%d", i8, v, len(cs)), func(b *testing.B) {
					kernelBench(b, kbOf(i8), 256, 2048, amxKnobs{variant: v}, 20, 1<<20, cs)
				})
			}
		}
	}
	for _, i8 := range []bool{false, true} {
		for _, mk := range [][2]int{{256, 2048}, {256, 768}, {128, 2048}} {
			if i8 && mk[0] == 128 {
				continue
			}
			pair := kbOf(i8).pairBytes(mk[1])
			for _, n := range []int{1, len(cpus) / 2, len(cpus)} {
				// one core: two pairs resident in its L2, 2000 calls (one
				// core's share of memory bandwidth would bound the streamed
				// form); more cores: 48 MiB streamed per thread
				wb, reps, tn := int64(48<<20), 2, fmt.Sprint(n)
				if n == 1 {
					wb, reps, tn = 2*pair, 1000, "1resident"
				}
				for _, c := range cfgs {
					name := fmt.Sprintf("i8=%v/m=%d/k=%d/threads=%s/%s", i8, mk[0], mk[1], tn, c.name)
					b.Run(name, func(b *testing.B) { kernelBench(b, kbOf(i8), mk[0], mk[1], c.kn, reps, wb, cpus[:n]) })
				}
			}
		}
	}
}

// BenchmarkAMXKernelShapes times the AMX prefill kernels at the engine's
// default knobs on the layer shapes of the 4096-token benchmark, with each
// thread's weights streamed from memory (48 MiB per thread, as a layer's
// experts are) or resident in its L2 (two 32-row pairs, reused call after
// call), on half and on all physical cores: how much of a kernel call's
// time the weight stream costs, and whether that cost grows with the core
// count, for int8 against bf16 (bf16 calls take 128 tokens, int8 calls a
// whole expert's: 128 on Qwen3.5, 256 on Qwen3-30B). Needs AMX:
//
//	moe.test -test.run XXX -test.bench AMXKernelShapes -test.benchtime 1x
func BenchmarkAMXKernelShapes(b *testing.B) {
	if !DetectFeatures().AMX {
		b.Skip("no AMX")
	}
	cpus := WorkerCPUs(PhysicalCores())
	kn := amxKnobs{kch: defaultAMXKBlock, pf: defaultAMXPrefetch, pfm: defaultAMXPrefetchTiles}
	for _, mk := range [][2]int{{128, 2048}, {128, 512}, {256, 2048}, {256, 768}} {
		for _, i8 := range []bool{false, true} {
			pair := kbOf(i8).pairBytes(mk[1])
			for _, w := range []struct {
				name  string
				bytes int64
			}{{"streamed", 48 << 20}, {"resident", 2 * pair}} {
				for _, n := range []int{len(cpus) / 2, len(cpus)} {
					// about 2000 kernel calls per thread either way
					reps := int(max(1, 2000*pair/w.bytes))
					b.Run(fmt.Sprintf("i8=%v/m=%d/k=%d/%s/threads=%d", i8, mk[0], mk[1], w.name, n), func(b *testing.B) {
						kernelBench(b, kbOf(i8), mk[0], mk[1], kn, reps, w.bytes, cpus[:n])
					})
				}
			}
		}
	}
}

// BenchmarkIntFewRows times the integer kernels where experts get few rows
// (16 or 32 tokens: prefill chunks of 256-1024 tokens), each thread's
// weights streamed (48 MiB) or resident in L2 (two 32-row pairs), on half
// and on all physical cores: the AMX prefill kernels (int4 ones unpack each
// call's panels first, INT4_KGROUP's requantizing; int4pf2048 with the
// unpack's prefetch; fused: the unpack inside the tile loop,
// Config.AMXInt4Fused) beside the AVX-512 VNNI decode kernels (vnni) that
// experts below Config.AMXMinTokens run. GB/s counts the weight bytes read
// per second, the bound that matters at these sizes. Needs AMX:
//
//	moe.test -test.run XXX -test.bench IntFewRows -test.benchtime 1x
func BenchmarkIntFewRows(b *testing.B) {
	if !DetectFeatures().AMX {
		b.Skip("no AMX")
	}
	cpus := WorkerCPUs(PhysicalCores())
	kn := amxKnobs{kch: defaultAMXKBlock, pf: defaultAMXPrefetch, pfm: defaultAMXPrefetchTiles}
	for _, f := range []kbFormat{kbInt8, kbInt4, kbInt4G} {
		for _, mk := range [][2]int{{16, 2048}, {32, 2048}, {32, 768}} {
			pair := f.pairBytes(mk[1])
			for _, w := range []struct {
				name  string
				bytes int64
			}{{"streamed", 48 << 20}, {"resident", 2 * pair}} {
				for _, n := range []int{len(cpus) / 2, len(cpus)} {
					for _, v := range []struct {
						name   string
						noAMX  bool
						i4pf   int
						i4fuse bool
					}{{"amx", false, 0, false}, {"amx-int4pf2048", false, 2048, false}, {"amx-fused-nopf", false, 0, true},
						{"amx-fused-pf1024", false, 1024, true}, {"amx-fused-pf2048", false, 2048, true},
						{"amx-fused-pf4096", false, 4096, true}, {"vnni", true, 0, false}} {
						if (v.i4pf > 0 || v.i4fuse) && f == kbInt8 {
							continue
						}
						reps := int(max(1, 2000*pair/w.bytes))
						k := kn
						k.i4pf, k.i4fuse = v.i4pf, v.i4fuse
						b.Run(fmt.Sprintf("%s/m=%d/k=%d/%s/threads=%d/%s", f, mk[0], mk[1], w.name, n, v.name), func(b *testing.B) {
							var tf float64
							for range b.N {
								t, err := amxKernelBench(f, mk[0], mk[1], k, reps, w.bytes, cpus[:n], v.noAMX)
								if err != nil {
									b.Fatal(err)
								}
								tf = t
							}
							b.ReportMetric(tf, "TFLOPS")
							// weight bytes per second: flops / (2 m) weights, pair / (32 k) bytes each
							b.ReportMetric(tf*1e12/float64(2*mk[0])*float64(pair)/float64(32*mk[1])/1e9, "GB/s")
						})
					}
				}
			}
		}
	}
}

// BenchmarkDecodeKernel runs the AVX-512 VNNI decode kernels alone at one
// token (the hybrid decode step's shape) for int8 (AMXINT8), int4 (AMXINT4)
// and group-wise int4 (INT4_KGROUP) panels of K 2048, on one worker core,
// half and all of them: each thread either streams 48 MiB of its own weights
// from memory or runs over 512 KiB of them resident in its L2 (about one
// core's share of the experts a hybrid step's prefetch reads into the
// caches before the task), with the engine's panel prefetch
// (defaultDecodePrefetch). GB/s counts the weight bytes read per second
// over all threads; resident, the kernels' arithmetic sets the pace, not the
// memory. Needs AVX-512 VNNI:
//
//	moe.test -test.run XXX -test.bench DecodeKernel -test.benchtime 1x
func BenchmarkDecodeKernel(b *testing.B) {
	if f := DetectFeatures(); !f.AVX512 || !f.VNNI {
		b.Skip("no AVX-512 VNNI")
	}
	cpus := WorkerCPUs(PhysicalCores())
	const k = 2048
	for _, f := range []kbFormat{kbInt8, kbInt4, kbInt4G} {
		pair := f.pairBytes(k)
		for _, w := range []struct {
			name  string
			bytes int64
		}{{"streamed", 48 << 20}, {"resident", 512 << 10}} {
			for _, n := range []int{1, max(1, len(cpus)/2), len(cpus)} {
				reps := int(max(1, 4000*pair/w.bytes))
				kn := amxKnobs{i4pf: defaultDecodePrefetch}
				b.Run(fmt.Sprintf("%s/%s/threads=%d", f, w.name, n), func(b *testing.B) {
					var tf float64
					for range b.N {
						t, err := amxKernelBench(f, 1, k, kn, reps, w.bytes, cpus[:n], true)
						if err != nil {
							b.Fatal(err)
						}
						tf = t
					}
					// weight bytes per second: flops / 2 weights, pair / (32 k) bytes each
					b.ReportMetric(tf*1e12/2*float64(pair)/float64(32*k)/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkAMXPairs runs the tile unit alone (operands resident, variant
// -1) on the first worker core by itself and then together with each other
// worker core in turn, then on all physical cores: a pair whose per-core rate
// falls to about half of the single core's shares one tile unit (hyperthread
// siblings of one physical core under the VM's vCPUs), while a fall that
// appears only with all cores is something the whole socket shares (its
// power or frequency budget). Needs AMX:
//
//	moe.test -test.run XXX -test.bench AMXPairs -test.benchtime 1x
func BenchmarkAMXPairs(b *testing.B) {
	if !DetectFeatures().AMX {
		b.Skip("no AMX")
	}
	cpus := WorkerCPUs(PhysicalCores())
	sets := [][]int{cpus[:1]}
	for _, c := range cpus[1:] {
		sets = append(sets, []int{cpus[0], c})
	}
	sets = append(sets, cpus)
	for _, i8 := range []bool{false, true} {
		for _, cs := range sets {
			name := fmt.Sprintf("i8=%v/cpus=%d", i8, cs[0])
			if len(cs) == 2 {
				name += fmt.Sprintf("+%d", cs[1])
			} else if len(cs) > 2 {
				name += fmt.Sprintf("..all%d", len(cs))
			}
			b.Run(name, func(b *testing.B) { kernelBench(b, kbOf(i8), 256, 2048, amxKnobs{variant: -1}, 20, 1<<20, cs) })
		}
	}
}

// BenchmarkAMXRows runs the L1-reload tile loop of the tile probe with the A
// and C tiles configured at 16, 12, 8 and 4 rows, on one core and on all
// physical cores. TFLOPS count the rows' real work, so a product whose time
// follows its rows keeps its TFLOPS and one that takes 16 rows' time
// whatever its height loses them in proportion: whether an expert's last,
// partly filled token tile would gain from a tile of its own height. Needs
// AMX:
//
//	moe.test -test.run XXX -test.bench AMXRows -test.benchtime 1x
func BenchmarkAMXRows(b *testing.B) {
	if !DetectFeatures().AMX {
		b.Skip("no AMX")
	}
	cpus := WorkerCPUs(PhysicalCores())
	for _, i8 := range []bool{false, true} {
		for _, cs := range [][]int{cpus[:1], cpus} {
			for _, rows := range []int{16, 12, 8, 4} {
				b.Run(fmt.Sprintf("i8=%v/threads=%d/rows=%d", i8, len(cs), rows), func(b *testing.B) {
					kernelBench(b, kbOf(i8), rows, 64, amxKnobs{variant: -6}, 20, kbOf(i8).pairBytes(64), cs)
				})
			}
		}
	}
}

// kernelBench runs amxKernelBench on the AMX kernels b.N times over cpus
// and reports the last run's TFLOPS, of all threads and per core.
func kernelBench(b *testing.B, f kbFormat, m, k int, kn amxKnobs, reps int, wbytes int64, cpus []int) {
	var tf float64
	for range b.N {
		t, err := amxKernelBench(f, m, k, kn, reps, wbytes, cpus, false)
		if err != nil {
			b.Fatal(err)
		}
		tf = t
	}
	b.ReportMetric(tf, "TFLOPS")
	b.ReportMetric(tf/float64(len(cpus)), "TFLOPS/core")
}

// TestKernelBenchHarness runs the kernel benchmark's harness (threads,
// buffers, the next-call pointers) with the AVX-512 kernels of the same
// formats, on any AVX-512 CPU: a smoke test of what BenchmarkAMXKernel
// runs on the device.
func TestKernelBenchHarness(t *testing.T) {
	f := DetectFeatures()
	if !f.AVX512 || !f.VNNI {
		t.Skip("needs AVX-512 with VNNI")
	}
	for _, f := range []kbFormat{kbBF16, kbInt8, kbInt4, kbInt4G} {
		tf, err := amxKernelBench(f, 40, 256, amxKnobs{kch: -1, pf: 1, pfm: 3, nxl: 4, i4pf: 2048}, 1, 1<<20, []int{-1, -1}, true)
		if err != nil {
			t.Fatal(err)
		}
		if !(tf > 0) {
			t.Fatalf("%s: %g TFLOPS, want > 0", f, tf)
		}
	}
	if _, err := amxKernelBench(kbBF16, 40, 100, amxKnobs{}, 1, 1<<20, []int{-1}, true); err == nil {
		t.Error("k = 100 accepted")
	}
	if _, err := amxKernelBench(kbInt4, 40, 192, amxKnobs{}, 1, 1<<20, []int{-1}, true); err == nil {
		t.Error("int4 at k = 192 (not whole 128-column blocks) accepted")
	}
}
