package units

import "testing"

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB", 5 << 50: "5120.0 TiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		sep  string
		want string
	}{
		{nil, ",", ""},
		{[]int{3}, ", ", "3"},
		{[]int{0, 1, 2, 5, 7, 8, 9}, ",", "0-2,5,7-9"},
		{[]int{0, 1, 2, 5, 7, 8}, ", ", "0-2, 5, 7-8"},
		{[]int{4, 6}, ",", "4,6"},
	} {
		if got := Ranges(tc.in, tc.sep); got != tc.want {
			t.Errorf("Ranges(%v, %q) = %q, want %q", tc.in, tc.sep, got, tc.want)
		}
	}
}
