//go:build !(linux && amd64 && cgo)

package main

import "github.com/spf13/cobra"

func init() { addCommand(newQuantCmd) }

func newQuantCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "quant MODEL_DIR --output DIR --method int8|int4",
		Short:              "Convert a model's routed experts to INT8/INT4 for the CPU expert engine (not in this build: needs cgo)",
		DisableFlagParsing: true,
		RunE:               func(*cobra.Command, []string) error { return errNoEngine },
	}
}
