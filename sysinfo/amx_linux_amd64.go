package sysinfo

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// arch_prctl codes and the XTILEDATA state component (Linux 5.16+).
const (
	archGetXCompSupp  = 0x1021
	archGetXCompPerm  = 0x1022
	archReqXCompPerm  = 0x1023
	xfeatureXTileData = 18
)

func archPrctl(code int, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_ARCH_PRCTL, uintptr(code), arg, 0)
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

func xcompMask(code int) (uint64, error) {
	var mask uint64
	if _, err := archPrctl(code, uintptr(unsafe.Pointer(&mask))); err != nil {
		return 0, err
	}
	return mask, nil
}

// AMXPermitted reports whether this process may already use AMX tile data
// (ARCH_GET_XCOMP_PERM). It does not change anything.
func AMXPermitted() bool {
	m, err := xcompMask(archGetXCompPerm)
	return err == nil && m&(1<<xfeatureXTileData) != 0
}

// AMXSupportedByKernel reports whether the kernel can manage AMX tile state
// at all (ARCH_GET_XCOMP_SUPP): false on kernels before 5.16 or when the
// CPU lacks AMX.
func AMXSupportedByKernel() bool {
	m, err := xcompMask(archGetXCompSupp)
	return err == nil && m&(1<<xfeatureXTileData) != 0
}

// RequestAMX asks the kernel for permission to use AMX tile data in this
// process (ARCH_REQ_XCOMP_PERM). It must succeed before any AMX instruction
// runs, or the process dies with SIGILL. Calling it again is harmless.
func RequestAMX() error {
	if AMXPermitted() {
		return nil
	}
	if _, err := archPrctl(archReqXCompPerm, xfeatureXTileData); err != nil {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA): %w (needs Linux 5.16+ and a CPU with AMX)", err)
	}
	if !AMXPermitted() {
		return fmt.Errorf("arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) succeeded but the permission is not set")
	}
	return nil
}
