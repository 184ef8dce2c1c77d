//go:build !(linux && amd64)

package sysinfo

import "errors"

// AMXPermitted reports whether this process may use AMX; always false off
// linux/amd64.
func AMXPermitted() bool { return false }

// AMXSupportedByKernel reports whether the kernel manages AMX state; always
// false off linux/amd64.
func AMXSupportedByKernel() bool { return false }

// RequestAMX always fails off linux/amd64.
func RequestAMX() error { return errors.New("AMX needs Linux on x86-64") }
