//go:build linux && (amd64 || arm64)

package wal

import (
	"syscall"

	"github.com/tabuladb/tabula/vfs"
)

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE: start writing back the
// range's dirty pages, without waiting for them or for earlier ones.
const syncFileRangeWrite = 2

// startWriteback starts the kernel writing bytes [off, off+n) of f back to
// the disk and returns at once, with sync_file_range(2). It reports false
// when f is not an OS file or the call fails, so that the caller fsyncs
// instead. It makes nothing durable: file metadata and the disk's own
// cache are left as they are.
func startWriteback(f SyncFile, off, n int64) bool {
	return vfs.WithFD(f, func(fd uintptr) bool {
		_, _, errno := syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
		return errno == 0
	})
}
