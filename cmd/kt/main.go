// Command kt serves Mixture-of-Experts language models on one machine with a
// GPU and a big CPU. Each subcommand lives in its own file and registers
// itself with addCommand from an init function.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// subcommands collects the constructors registered by the files of this package.
var subcommands []func() *cobra.Command

// addCommand registers a subcommand constructor; call it from init.
func addCommand(c func() *cobra.Command) { subcommands = append(subcommands, c) }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "kt",
		Short:         "kt runs giant MoE language models on one GPU and a big CPU",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, c := range subcommands {
		root.AddCommand(c())
	}
	return root
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kt:", err)
		os.Exit(1)
	}
}
