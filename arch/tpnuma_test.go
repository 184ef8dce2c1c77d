package arch

import "testing"

func TestCPUList(t *testing.T) {
	for _, c := range []struct {
		cpus []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{0, 1, 2, 3, 8}, "0-3,8"},
		{[]int{9, 1, 0, 8, 4}, "0-1,4,8-9"},
	} {
		if got := cpuList(c.cpus); got != c.want {
			t.Errorf("cpuList(%v) = %q, want %q", c.cpus, got, c.want)
		}
	}
	if got := describeGroups([][]int{{0, 1, 100, 101}, {2, 3}}); got != "rank 0: 0-1,100-101, rank 1: 2-3" {
		t.Errorf("describeGroups: %q", got)
	}
}
