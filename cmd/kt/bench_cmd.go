package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

func init() { addCommand(newBenchCmd) }

// benchType is one kind of kt bench; others (serving, attention, ...) add
// themselves with addBenchType from an init function in their own file.
type benchType struct {
	short string
	flags func(cmd *cobra.Command)
	run   func(cmd *cobra.Command, out io.Writer) error
}

var benchTypes = map[string]benchType{}

func addBenchType(name string, t benchType) { benchTypes[name] = t }

func newBenchCmd() *cobra.Command {
	var typ string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Kernel and serving benchmarks (kt bench --type moe)",
		Long:  "Benchmarks. Types:\n" + benchTypeList(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, ok := benchTypes[typ]
			if !ok {
				return fmt.Errorf("unknown bench type %q; known:\n%s", typ, benchTypeList())
			}
			return t.run(cmd, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&typ, "type", "moe", "benchmark type")
	// in name order: a type may reuse a flag an earlier one defined
	for _, n := range benchTypeNames() {
		if t := benchTypes[n]; t.flags != nil {
			t.flags(cmd)
		}
	}
	return cmd
}

// benchTypeNames returns the bench types' names, sorted.
func benchTypeNames() []string {
	names := make([]string, 0, len(benchTypes))
	for n := range benchTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func benchTypeList() string {
	var b strings.Builder
	for _, n := range benchTypeNames() {
		fmt.Fprintf(&b, "  %-10s %s\n", n, benchTypes[n].short)
	}
	return b.String()
}
