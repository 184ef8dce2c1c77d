//go:build unix

package sysinfo

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// DiskFree returns the bytes available to unprivileged users on the file
// system holding path.
func DiskFree(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
