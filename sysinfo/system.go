package sysinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// CPU describes the processor(s).
type CPU struct {
	Model  string // "model name" from /proc/cpuinfo
	Vendor string
	ISA    ISA
	// LogicalCPUs counts online hardware threads; PhysicalCores distinct
	// (package, core) pairs among them; Sockets distinct packages.
	LogicalCPUs   int
	PhysicalCores int
	Sockets       int
	// UsableCPUs is how many CPUs this process may run on (affinity mask,
	// as runtime.NumCPU reports it).
	UsableCPUs int
}

// NUMANode is one memory node.
type NUMANode struct {
	ID       int
	CPUs     []int
	MemTotal int64 // bytes
	MemFree  int64 // bytes
}

// Memory is the system's RAM as /proc/meminfo and cgroups report it.
type Memory struct {
	Total     int64 // bytes
	Available int64 // MemAvailable: what can be allocated without swapping
	Free      int64
	// CgroupLimit is the cgroup v2 memory.max (or v1 limit) when one is
	// set, else 0.
	CgroupLimit int64
	// THP is the transparent huge page mode ("always", "madvise", "never"),
	// or "" when the kernel does not expose it; THPDefrag likewise.
	THP       string
	THPDefrag string
}

// Info is everything sysinfo reports.
type Info struct {
	CPU    CPU
	NUMA   []NUMANode
	Memory Memory
	// Warnings lists what could not be read (a missing /sys file, say);
	// the rest of Info is still valid.
	Warnings []string
}

// Detect reads the live system.
func Detect() *Info {
	return Read(os.DirFS("/"), nil)
}

// DetectMemory reads the live system's memory alone (Info.Memory without
// the CPU, topology and NUMA reads of Detect).
func DetectMemory() Memory {
	info := &Info{}
	info.readMemory(os.DirFS("/"))
	return info.Memory
}

// Read gathers Info from fsys, a tree rooted at "/" (with proc/ and sys/).
// isa, when not nil, overrides CPUID detection (tests).
func Read(fsys fs.FS, isa *ISA) *Info {
	info := &Info{}
	flags := info.readCPUInfo(fsys)
	if isa != nil {
		info.CPU.ISA = *isa
	} else {
		info.CPU.ISA = DetectISA(flags)
	}
	info.readTopology(fsys)
	info.CPU.UsableCPUs = runtime.NumCPU()
	info.readNUMA(fsys)
	info.readMemory(fsys)
	return info
}

func (info *Info) warn(format string, args ...any) {
	info.Warnings = append(info.Warnings, fmt.Sprintf(format, args...))
}

// readCPUInfo takes the model and vendor from the first processor entry of
// /proc/cpuinfo and returns its flags.
func (info *Info) readCPUInfo(fsys fs.FS) []string {
	b, err := fs.ReadFile(fsys, "proc/cpuinfo")
	if err != nil {
		info.warn("reading /proc/cpuinfo: %v", err)
		return nil
	}
	var flags []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			if info.CPU.Model == "" {
				info.CPU.Model = v
			}
		case "vendor_id":
			if info.CPU.Vendor == "" {
				info.CPU.Vendor = v
			}
		case "flags":
			if flags == nil {
				flags = strings.Fields(v)
			}
		}
	}
	return flags
}

// ParseCPUList parses a kernel CPU list such as "0-3,8,10-11".
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	var out []int
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad CPU list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("bad CPU list %q", s)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

func readTrim(fsys fs.FS, p string) (string, error) {
	b, err := fs.ReadFile(fsys, p)
	return strings.TrimSpace(string(b)), err
}

func (info *Info) readTopology(fsys fs.FS) {
	const base = "sys/devices/system/cpu"
	s, err := readTrim(fsys, base+"/online")
	if err != nil {
		info.warn("reading /%s/online: %v", base, err)
		return
	}
	cpus, err := ParseCPUList(s)
	if err != nil {
		info.warn("/%s/online: %v", base, err)
		return
	}
	info.CPU.LogicalCPUs = len(cpus)
	type core struct{ pkg, id string }
	cores := map[core]bool{}
	pkgs := map[string]bool{}
	for _, c := range cpus {
		dir := fmt.Sprintf("%s/cpu%d/topology", base, c)
		pkg, err1 := readTrim(fsys, dir+"/physical_package_id")
		id, err2 := readTrim(fsys, dir+"/core_id")
		if err1 != nil || err2 != nil {
			info.warn("no topology for cpu%d; counting it as its own core", c)
			pkg, id = "?", strconv.Itoa(c)
		}
		cores[core{pkg, id}] = true
		pkgs[pkg] = true
	}
	info.CPU.PhysicalCores = len(cores)
	info.CPU.Sockets = len(pkgs)
}

func (info *Info) readNUMA(fsys fs.FS) {
	const base = "sys/devices/system/node"
	entries, err := fs.ReadDir(fsys, base)
	if err != nil {
		info.warn("reading /%s: %v (no NUMA information)", base, err)
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "node") {
			continue
		}
		id, err := strconv.Atoi(strings.TrimPrefix(name, "node"))
		if err != nil {
			continue
		}
		n := NUMANode{ID: id}
		if s, err := readTrim(fsys, path.Join(base, name, "cpulist")); err == nil {
			n.CPUs, err = ParseCPUList(s)
			if err != nil {
				info.warn("/%s/%s/cpulist: %v", base, name, err)
			}
		}
		if b, err := fs.ReadFile(fsys, path.Join(base, name, "meminfo")); err == nil {
			m := parseMeminfo(b)
			n.MemTotal, n.MemFree = m["MemTotal"], m["MemFree"]
		}
		info.NUMA = append(info.NUMA, n)
	}
	sort.Slice(info.NUMA, func(i, j int) bool { return info.NUMA[i].ID < info.NUMA[j].ID })
}

// parseMeminfo reads "Key: N kB" lines (also the per-node "Node 0 Key: N
// kB" form) into bytes.
func parseMeminfo(b []byte) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(k)
		if len(f) == 0 {
			continue
		}
		key := f[len(f)-1]
		vf := strings.Fields(v)
		if len(vf) == 0 {
			continue
		}
		n, err := strconv.ParseInt(vf[0], 10, 64)
		if err != nil || n < 0 {
			continue
		}
		if len(vf) > 1 && strings.EqualFold(vf[1], "kB") {
			n *= 1024
		}
		out[key] = n
	}
	return out
}

func (info *Info) readMemory(fsys fs.FS) {
	b, err := fs.ReadFile(fsys, "proc/meminfo")
	if err != nil {
		info.warn("reading /proc/meminfo: %v", err)
	} else {
		m := parseMeminfo(b)
		info.Memory.Total, info.Memory.Free = m["MemTotal"], m["MemFree"]
		info.Memory.Available = m["MemAvailable"]
		if info.Memory.Available == 0 {
			info.Memory.Available = m["MemFree"]
		}
	}
	for _, p := range []string{"sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		s, err := readTrim(fsys, p)
		if err != nil || s == "max" {
			continue
		}
		// v1 reports "no limit" as a huge number.
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && n < 1<<60 {
			info.Memory.CgroupLimit = n
			break
		}
	}
	info.Memory.THP = bracketed(fsys, "sys/kernel/mm/transparent_hugepage/enabled")
	info.Memory.THPDefrag = bracketed(fsys, "sys/kernel/mm/transparent_hugepage/defrag")
}

// bracketed returns the selected [value] of a sysfs choice file.
func bracketed(fsys fs.FS, p string) string {
	s, err := readTrim(fsys, p)
	if err != nil {
		return ""
	}
	for _, f := range strings.Fields(s) {
		if strings.HasPrefix(f, "[") && strings.HasSuffix(f, "]") {
			return strings.Trim(f, "[]")
		}
	}
	return s
}

// EffectiveMemory returns the RAM this process can count on: available
// memory, capped by a cgroup limit when one is set.
func (m Memory) EffectiveMemory() int64 {
	if m.CgroupLimit > 0 && m.CgroupLimit < m.Available {
		return m.CgroupLimit
	}
	return m.Available
}

// CPUsOf returns the CPUs of NUMA node id, or nil.
func (info *Info) CPUsOf(id int) []int {
	for _, n := range info.NUMA {
		if n.ID == id {
			return slices.Clone(n.CPUs)
		}
	}
	return nil
}

// CPUInfoFlags returns the flags of the first processor in /proc/cpuinfo,
// or nil when it cannot be read.
func CPUInfoFlags() []string {
	info := &Info{}
	return info.readCPUInfo(os.DirFS("/"))
}

// NodeCores returns the cores of each NUMA node of fsys (a tree rooted at
// "/"), in node id order, keeping only the CPUs in allowed (nil: all) and
// the nodes left with some: per node its cores (hardware threads of one
// (package, core_id), counted as its own core where the topology is not
// readable) in order of their first CPU, each core's CPUs in increasing
// order. It returns nil when /sys has no NUMA nodes.
func NodeCores(fsys fs.FS, allowed []int) [][][]int {
	info := &Info{}
	info.readNUMA(fsys)
	ok := map[int]bool{}
	for _, c := range allowed {
		ok[c] = true
	}
	type core struct{ pkg, id string }
	var out [][][]int
	for _, n := range info.NUMA {
		idx := map[core]int{}
		var cores [][]int
		for _, c := range n.CPUs { // increasing: a core's first CPU comes first
			if allowed != nil && !ok[c] {
				continue
			}
			dir := fmt.Sprintf("sys/devices/system/cpu/cpu%d/topology", c)
			pkg, err1 := readTrim(fsys, dir+"/physical_package_id")
			id, err2 := readTrim(fsys, dir+"/core_id")
			if err1 != nil || err2 != nil {
				pkg, id = "?", strconv.Itoa(c)
			}
			k := core{pkg, id}
			if i, seen := idx[k]; seen {
				cores[i] = append(cores[i], c)
				continue
			}
			idx[k] = len(cores)
			cores = append(cores, []int{c})
		}
		if len(cores) > 0 {
			out = append(out, cores)
		}
	}
	return out
}
