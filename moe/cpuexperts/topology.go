package cpuexperts

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// parseCPUList parses a Linux cpulist ("0-3,8,10-11").
func parseCPUList(s string) ([]int, error) {
	var out []int
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, fmt.Errorf("bad cpu list %q", s)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out, nil
}

// topology describes the NUMA nodes and cores the engine may use.
type topology struct {
	nodes   map[int][]int // node -> CPUs (allowed ones only), primaries of each core first
	allowed []int
	cores   int // allowed CPUs that are the first hardware thread of their core
}

// readTopology reads /sys (root may point elsewhere in tests); allowed is the
// process affinity set.
func readTopology(root string, allowed []int) topology {
	t := topology{nodes: map[int][]int{}, allowed: allowed}
	ok := map[int]bool{}
	for _, c := range allowed {
		ok[c] = true
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "devices/system/node/node[0-9]*"))
	for _, d := range dirs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(d, "cpulist"))
		if err != nil {
			continue
		}
		cpus, err := parseCPUList(string(b))
		if err != nil {
			continue
		}
		var mine []int
		for _, c := range cpus {
			if ok[c] {
				mine = append(mine, c)
			}
		}
		if len(mine) > 0 {
			t.nodes[n] = primariesFirst(root, mine)
		}
	}
	if len(t.nodes) == 0 {
		t.nodes[0] = primariesFirst(root, allowed)
	}
	prim, _ := splitPrimaries(root, allowed)
	t.cores = len(prim)
	return t
}

// primariesFirst orders cpus so that the first hardware thread of every core
// comes before its siblings: threads are pinned one per physical core first.
func primariesFirst(root string, cpus []int) []int {
	prim, sec := splitPrimaries(root, cpus)
	return append(prim, sec...)
}

func splitPrimaries(root string, cpus []int) (prim, sec []int) {
	for _, c := range cpus {
		b, err := os.ReadFile(filepath.Join(root, fmt.Sprintf("devices/system/cpu/cpu%d/topology/thread_siblings_list", c)))
		first := c
		if err == nil {
			if l, err := parseCPUList(string(b)); err == nil && len(l) > 0 {
				first = l[0]
			}
		}
		if first == c {
			prim = append(prim, c)
		} else {
			sec = append(sec, c)
		}
	}
	sort.Ints(prim)
	sort.Ints(sec)
	return prim, sec
}

// physicalCores counts the allowed CPUs that are the first thread of their core.
func (t topology) physicalCores() int { return t.cores }

// plan assigns CPUs to the threads of each pool. nodes[p] is the node of pool
// p; a node this machine lacks gets node -1 (no binding) and shares all CPUs.
func (t topology) plan(threads []int, nodes []int) (cpus []int, bind []int) {
	bind = make([]int, len(threads))
	used := map[int]int{}
	for p, n := range threads {
		list, ok := t.nodes[nodes[p]]
		bind[p] = nodes[p]
		if !ok || len(t.nodes) == 1 {
			if !ok {
				bind[p] = -1
			}
			// one node shared by several pools: give each pool its own share
			all := t.all()
			list = all
			if len(threads) > 1 && len(all) >= len(threads) {
				share := len(all) / len(threads)
				list = all[p*share : (p+1)*share]
			}
		}
		for i := 0; i < n; i++ {
			c := list[(used[nodes[p]]+i)%len(list)]
			cpus = append(cpus, c)
		}
		used[nodes[p]] += n
	}
	return cpus, bind
}

func (t topology) all() []int {
	keys := make([]int, 0, len(t.nodes))
	for n := range t.nodes {
		keys = append(keys, n)
	}
	sort.Ints(keys)
	var all []int
	for _, n := range keys {
		all = append(all, t.nodes[n]...)
	}
	return all
}
