package sysinfo

import (
	"fmt"
	"slices"
	"testing"
	"testing/fstest"
)

// dualSocket builds a /proc + /sys tree for 2 sockets x 2 cores x 2 threads
// with one NUMA node per socket.
func dualSocket() fstest.MapFS {
	m := fstest.MapFS{
		"proc/cpuinfo":                               {Data: []byte("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu avx2 avx512f avx512_fp16 amx_tile\n\nprocessor\t: 1\nmodel name\t: other\n")},
		"proc/meminfo":                               {Data: []byte("MemTotal:       1056000000 kB\nMemFree:         900000000 kB\nMemAvailable:    950000000 kB\nHugePages_Total:       0\n")},
		"sys/devices/system/cpu/online":              {Data: []byte("0-7\n")},
		"sys/devices/system/node/node0/cpulist":      {Data: []byte("0-1,4-5\n")},
		"sys/devices/system/node/node0/meminfo":      {Data: []byte("Node 0 MemTotal:       528000000 kB\nNode 0 MemFree:        450000000 kB\n")},
		"sys/devices/system/node/node1/cpulist":      {Data: []byte("2-3,6-7\n")},
		"sys/devices/system/node/node1/meminfo":      {Data: []byte("Node 1 MemTotal:       528000000 kB\nNode 1 MemFree:        450000000 kB\n")},
		"sys/devices/system/node/possible":           {Data: []byte("0-1\n")},
		"sys/kernel/mm/transparent_hugepage/enabled": {Data: []byte("[always] madvise never\n")},
		"sys/kernel/mm/transparent_hugepage/defrag":  {Data: []byte("always defer defer+madvise [madvise] never\n")},
		"sys/fs/cgroup/memory.max":                   {Data: []byte("137438953472\n")},
	}
	for c := range 8 {
		pkg := (c / 2) % 2 // threads c and c+4 share a core
		m[fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology/physical_package_id", c)] = &fstest.MapFile{Data: []byte(fmt.Sprintf("%d\n", pkg))}
		m[fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology/core_id", c)] = &fstest.MapFile{Data: []byte(fmt.Sprintf("%d\n", c%2))}
	}
	return m
}

func TestReadSynthetic(t *testing.T) {
	isa := ISA{AVX2: true}
	info := Read(dualSocket(), &isa)
	if len(info.Warnings) != 0 {
		t.Errorf("warnings: %v", info.Warnings)
	}
	c := info.CPU
	if c.Model != "Intel(R) Xeon(R) Platinum 8480+" || c.Vendor != "GenuineIntel" {
		t.Errorf("model %q vendor %q", c.Model, c.Vendor)
	}
	if c.LogicalCPUs != 8 || c.PhysicalCores != 4 || c.Sockets != 2 {
		t.Errorf("logical %d physical %d sockets %d, want 8 4 2", c.LogicalCPUs, c.PhysicalCores, c.Sockets)
	}
	if len(info.NUMA) != 2 || !slices.Equal(info.NUMA[1].CPUs, []int{2, 3, 6, 7}) || info.NUMA[0].MemTotal != 528000000*1024 {
		t.Errorf("numa = %+v", info.NUMA)
	}
	m := info.Memory
	if m.Total != 1056000000*1024 || m.Available != 950000000*1024 || m.THP != "always" || m.THPDefrag != "madvise" || m.CgroupLimit != 128<<30 {
		t.Errorf("memory = %+v", m)
	}
	if m.EffectiveMemory() != 128<<30 {
		t.Errorf("effective = %d", m.EffectiveMemory())
	}
}

func TestReadEmpty(t *testing.T) {
	info := Read(fstest.MapFS{}, &ISA{})
	if len(info.Warnings) < 3 {
		t.Errorf("want warnings for every missing source, got %v", info.Warnings)
	}
	if info.Memory.THP != "" || info.CPU.LogicalCPUs != 0 {
		t.Errorf("info = %+v", info)
	}
}

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{"0", []int{0}, false},
		{"0-3", []int{0, 1, 2, 3}, false},
		{"0-1,8,10-11\n", []int{0, 1, 8, 10, 11}, false},
		{"", []int{}, false},
		{"3-1", nil, true},
		{"a", nil, true},
		{"0-99999999", nil, true},
		{"-1", nil, true},
	} {
		got, err := ParseCPUList(c.in)
		if (err != nil) != c.bad || (!c.bad && !slices.Equal(got, c.want)) {
			t.Errorf("ParseCPUList(%q) = %v, %v", c.in, got, err)
		}
	}
}

func TestKernelVariant(t *testing.T) {
	avx512 := ISA{AVX2: true, FMA: true, F16C: true, AVX512F: true, AVX512BW: true, AVX512VL: true}
	vnni := avx512
	vnni.AVX512VNNI = true
	bf16 := vnni
	bf16.AVX512BF16 = true
	amx := bf16
	amx.AMXTile, amx.AMXInt8, amx.AMXBF16 = true, true, true
	for _, c := range []struct {
		isa     ISA
		granted bool
		want    string
	}{
		{ISA{}, false, VariantGeneric},
		{ISA{AVX2: true}, false, VariantGeneric}, // no FMA
		{ISA{AVX2: true, FMA: true, F16C: true}, false, VariantAVX2},
		{ISA{AVX2: true, FMA: true, F16C: true, AVX512F: true}, false, VariantAVX2}, // F alone (Knights) is not enough
		{avx512, false, VariantAVX512},
		{vnni, false, VariantAVX512VNNI},
		{bf16, false, VariantAVX512BF16},
		{amx, false, VariantAVX512BF16}, // AMX without the OS grant
		{amx, true, VariantAMX},
	} {
		if got := c.isa.KernelVariant(c.granted); got != c.want {
			t.Errorf("%v granted=%v: %s, want %s", c.isa, c.granted, got, c.want)
		}
	}
}

// TestAMXRequest runs the real arch_prctl calls: on a machine without AMX
// the request fails cleanly; with AMX it succeeds and sticks.
func TestAMXRequest(t *testing.T) {
	isa := DetectISA(nil)
	err := RequestAMX()
	if isa.AMXTile && AMXSupportedByKernel() {
		if err != nil || !AMXPermitted() {
			t.Fatalf("AMX CPU and kernel, but request failed: %v", err)
		}
	} else if err == nil && !AMXPermitted() {
		t.Fatal("request reported success without the permission")
	}
	t.Logf("amx tile=%v kernel=%v permitted=%v err=%v", isa.AMXTile, AMXSupportedByKernel(), AMXPermitted(), err)
}

func TestDiskFree(t *testing.T) {
	n, err := DiskFree(t.TempDir())
	if err != nil || n <= 0 {
		t.Errorf("DiskFree = %d, %v", n, err)
	}
	if _, err := DiskFree("/does/not/exist"); err == nil {
		t.Error("no error for a missing path")
	}
}

func TestNodeCores(t *testing.T) {
	for _, c := range []struct {
		name    string
		fs      fstest.MapFS
		allowed []int
		want    string
	}{
		{"two nodes of two cores of two threads", dualSocket(), nil, "[[[0 4] [1 5]] [[2 6] [3 7]]]"},
		{"affinity leaves one node", dualSocket(), []int{0, 1, 4}, "[[[0 4] [1]]]"},
		{"no NUMA information", fstest.MapFS{}, nil, "[]"},
		{"no topology: one core per CPU", fstest.MapFS{"sys/devices/system/node/node0/cpulist": {Data: []byte("0-2\n")}}, nil, "[[[0] [1] [2]]]"},
	} {
		if got := fmt.Sprint(NodeCores(c.fs, c.allowed)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
