//go:build !linux

package cpu

import "errors"

// PinThread binds the calling OS thread to cpus: only on Linux.
func PinThread(cpus []int) error {
	if len(cpus) == 0 {
		return nil
	}
	return errors.New("pinning threads to CPUs needs Linux")
}

// AllowedCPUs returns the CPUs this process may run on: unknown here.
func AllowedCPUs() []int { return nil }
