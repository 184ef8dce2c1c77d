package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/ktserve/kt/sysinfo"
)

// version is set at link time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func init() { addCommand(newVersionCmd) }

// buildCommit returns the VCS revision stamped into the binary (with a
// "-dirty" suffix for modified trees), or "unknown" (go run, -buildvcs=false).
func buildCommit() string {
	commit, dirty := "unknown", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if dirty {
		commit += "-dirty"
	}
	return commit
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kt's version, build, platform and the CPU kernel variant it will use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "kt %s (commit %s)\n", version, buildCommit())
			fmt.Fprintf(w, "go %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			isa := sysinfo.DetectISA(cpuinfoFlags())
			amx := isa.AMXTile && sysinfo.RequestAMX() == nil
			fmt.Fprintf(w, "cpu kernels %s\n", isa.KernelVariant(amx))
			for _, f := range versionExtras {
				f(w)
			}
			return nil
		},
	}
}

// cpuinfoFlags returns the flags line of /proc/cpuinfo (nil if unreadable).
func cpuinfoFlags() []string {
	return sysinfo.CPUInfoFlags()
}
