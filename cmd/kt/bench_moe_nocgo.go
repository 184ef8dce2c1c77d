//go:build !(linux && amd64 && cgo)

package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"
)

// errNoEngine is what the commands that need the CPU expert engine say in a
// build without it.
var errNoEngine = errors.New("the CPU expert engine needs a cgo build for linux/amd64 (this kt was built with CGO_ENABLED=0 or for another platform); rebuild with cgo and gcc")

func init() {
	addBenchType("moe", benchType{
		short: "one MoE layer on the CPU expert engine (not in this build: needs cgo)",
		run:   func(*cobra.Command, io.Writer) error { return errNoEngine },
	})
}
