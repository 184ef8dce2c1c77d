//go:build !(linux && amd64 && cgo)

package main

// cpuExpertMethods is empty: this build has no CPU expert engine, so
// kt serve refuses --kt-weight-path saying so.
func cpuExpertMethods() []string { return nil }
