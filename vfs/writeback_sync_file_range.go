//go:build linux && (amd64 || arm64)

package vfs

import "syscall"

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE: start writing back the
// range's dirty pages, without waiting for them or for earlier ones.
const syncFileRangeWrite = 2

func startWriteback(f any, off, n int64) bool {
	return WithFD(f, func(fd uintptr) bool {
		_, _, errno := syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
		return errno == 0
	})
}
