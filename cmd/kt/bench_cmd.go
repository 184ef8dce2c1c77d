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
	for _, t := range benchTypes {
		if t.flags != nil {
			t.flags(cmd)
		}
	}
	return cmd
}

func benchTypeList() string {
	names := make([]string, 0, len(benchTypes))
	for n := range benchTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, benchTypes[n].short)
	}
	return b.String()
}
