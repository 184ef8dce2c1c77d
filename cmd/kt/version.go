package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/backend/cuda"
)

// version is set at link time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func init() { addCommand(newVersionCmd) }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kt's version, build and platform",
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			commit := "unknown"
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						commit = s.Value
					}
				}
			}
			fmt.Fprintf(w, "kt %s (commit %s)\n", version, commit)
			fmt.Fprintf(w, "go %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			for _, l := range cuda.VersionLines() {
				fmt.Fprintln(w, l)
			}
			return nil
		},
	}
}
