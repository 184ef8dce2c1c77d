// Package units formats quantities for people: byte counts with binary
// units and sorted integer lists as compact ranges. It is the one place
// for these formats (kt doctor, kt inspect and kt convert-adapter share it).
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// Bytes formats a byte count with a binary unit (B, KiB, MiB, GiB, TiB),
// one decimal above bytes: "1023 B", "1.5 KiB".
func Bytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// Ranges formats sorted ints compactly, runs of consecutive values as
// "a-b", joined by sep: Ranges([]int{0, 1, 2, 5}, ",") is "0-2,5". An empty
// list gives "".
func Ranges(xs []int, sep string) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(xs[i]))
		} else {
			parts = append(parts, strconv.Itoa(xs[i])+"-"+strconv.Itoa(xs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, sep)
}
