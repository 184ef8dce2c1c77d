//go:build unix

package tokenizer

import (
	"syscall"
	"time"
)

// cpuTime returns the process's user+system CPU time, so benchmarks can
// report throughput per CPU second, which a busy shared machine distorts
// far less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
