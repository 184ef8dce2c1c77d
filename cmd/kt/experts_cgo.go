//go:build linux && amd64 && cgo

package main

import "github.com/ktserve/kt/moe/cpuexperts"

// cpuExpertMethods lists the --kt-method names the CPU expert engine
// implements.
func cpuExpertMethods() []string {
	names := make([]string, len(cpuexperts.Methods))
	for i, m := range cpuexperts.Methods {
		names[i] = string(m)
	}
	return names
}
