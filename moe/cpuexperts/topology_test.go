package cpuexperts

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		bad  bool
	}{
		{"0-3,8,10-11\n", []int{0, 1, 2, 3, 8, 10, 11}, false},
		{"5", []int{5}, false},
		{"", nil, false},
		{"3-1", nil, true},
		{"a", nil, true},
		{"-1", nil, true},
		{"0-99999999", nil, true},
	} {
		got, err := parseCPUList(c.in)
		if (err != nil) != c.bad || !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v (error %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8", "0", "", "1-0", "0-65536", ",", "7-7,1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseCPUList(s)
		if err == nil && len(l) > 1<<20 {
			t.Fatalf("%q expanded to %d cpus", s, len(l))
		}
	})
}

// A fake /sys with two nodes and hyperthread pairs: threads go one per core
// first, each pool on its own node.
func TestTopologyPlan(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("devices/system/node/node0/cpulist", "0-1,4-5")
	write("devices/system/node/node1/cpulist", "2-3,6-7")
	for c, sib := range map[int]string{0: "0,4", 4: "0,4", 1: "1,5", 5: "1,5", 2: "2,6", 6: "2,6", 3: "3,7", 7: "3,7"} {
		write(filepath.Join("devices/system/cpu", "cpu"+string(rune('0'+c)), "topology/thread_siblings_list"), sib)
	}
	topo := readTopology(root, []int{0, 1, 2, 3, 4, 5, 6, 7})
	if topo.physicalCores() != 4 {
		t.Errorf("physical cores %d, want 4", topo.physicalCores())
	}
	cpus, bind := topo.plan([]int{2, 3}, []int{0, 1})
	if !reflect.DeepEqual(cpus, []int{0, 1, 2, 3, 6}) || !reflect.DeepEqual(bind, []int{0, 1}) {
		t.Errorf("plan = %v bind %v; want [0 1 2 3 6] [0 1]", cpus, bind)
	}
}
