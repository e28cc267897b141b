//go:build linux && (amd64 || arm64)

package vfs

import (
	"os"
	"strconv"
	"syscall"
)

// openDirect opens f's descriptor's file again through /proc, which names
// the open file itself, whatever its path is now.
func openDirect(f any) (DirectFile, bool) {
	var direct *os.File
	WithFD(f, func(fd uintptr) bool {
		g, err := os.OpenFile("/proc/self/fd/"+strconv.FormatUint(uint64(fd), 10), os.O_WRONLY|syscall.O_DIRECT, 0)
		if err != nil {
			return false
		}
		direct = g
		return true
	})
	if direct == nil {
		return nil, false
	}
	return direct, true
}
