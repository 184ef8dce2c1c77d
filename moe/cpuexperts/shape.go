package cpuexperts

import (
	"fmt"
	"strings"
)

// CheckShape reports every layout constraint of the kernels that a layer
// of the given hidden and intermediate (moe_intermediate_size) sizes split
// over pools thread pools breaks, each named by its real cause. With method
// "" only the constraints every method shares are checked. It needs no
// engine, so callers can ask which methods a model allows before loading.
func CheckShape(m Method, hidden, intermediate, pools int) error {
	var bad []string
	if hidden <= 0 || intermediate <= 0 || pools <= 0 {
		return fmt.Errorf("hidden size %d, intermediate size %d and thread pools %d must be positive", hidden, intermediate, pools)
	}
	if hidden%128 != 0 {
		bad = append(bad, fmt.Sprintf("hidden size %d is not a multiple of 128 (the kernels work on 128-column blocks)", hidden))
	}
	if intermediate%pools != 0 {
		bad = append(bad, fmt.Sprintf("intermediate size %d does not divide into %d thread pools", intermediate, pools))
	} else {
		ip := intermediate / pools
		switch {
		case (m == AMXINT4 || m == INT4KGroup || m == FP8 || m == RAWINT4) && ip%128 != 0:
			bad = append(bad, fmt.Sprintf("method %s needs each pool's intermediate slice (%d = %d / %d pools) to be a multiple of 128", m, ip, intermediate, pools))
		case ip%32 != 0:
			bad = append(bad, fmt.Sprintf("each pool's intermediate slice (%d = %d / %d pools) is not a multiple of 32", ip, intermediate, pools))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}

// MethodsFor lists the methods whose layout constraints a layer of these
// sizes over pools thread pools meets (CheckShape), in Methods order.
func MethodsFor(hidden, intermediate, pools int) []Method {
	var ok []Method
	for _, m := range Methods {
		if CheckShape(m, hidden, intermediate, pools) == nil {
			ok = append(ok, m)
		}
	}
	return ok
}
