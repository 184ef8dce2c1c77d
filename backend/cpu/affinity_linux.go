//go:build linux

package cpu

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// PinThread binds the calling OS thread to cpus (the goroutine must be
// locked to its thread: runtime.LockOSThread).
func PinThread(cpus []int) error {
	if len(cpus) == 0 {
		return nil
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if c < 0 || c >= len(set)*64 {
			return fmt.Errorf("pinning a thread: CPU %d out of range", c)
		}
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pinning a thread to CPUs %v: %w", cpus, err)
	}
	return nil
}

// AllowedCPUs returns the CPUs this process may run on (its affinity
// mask), nil when it cannot be read.
func AllowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var out []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out
}
