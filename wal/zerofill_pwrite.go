//go:build linux && (amd64 || arm64)

package wal

import (
	"syscall"

	"github.com/tabuladb/tabula/vfs"
)

// zeroPage is the page zeroFill writes from, never written to: a reused
// file's writer zeroes a page in every write-out round that ends past its
// zeros (zeroLastPage), which allocated a page each time.
var zeroPage [pageSize]byte

// zeroFill writes n zero bytes at offset off of f, without moving the
// offset its writes append at, with pwrite(2), a page at a time: the page
// cache sizes a folio by the write that creates it, and the log's small
// synced writes over a 64 KiB folio dirtied (and wrote back) all of it,
// four times the bytes a page each did (write_bytes of /proc/self/io, one
// 310-byte record synced at a time: 50 bytes per byte written over zeros
// written 64 KiB at a time, 16 over zeros written a page at a time, 14
// appending). It reports false when f is not an OS file or the write
// fails: nothing of the log is at stake, past its end.
func zeroFill(f SyncFile, off, n int64) bool {
	return vfs.WithFD(f, func(fd uintptr) bool {
		for n > 0 {
			k, err := syscall.Pwrite(int(fd), zeroPage[:min(n, pageSize-off%pageSize)], off)
			if err != nil || k == 0 {
				return false
			}
			off, n = off+int64(k), n-int64(k)
		}
		return true
	})
}

// dropCache drops the first n bytes of f from the page cache with
// posix_fadvise(2), and reports false when f is not an OS file or the
// call fails. Only clean pages are dropped.
func dropCache(f SyncFile, n int64) bool {
	return vfs.WithFD(f, func(fd uintptr) bool { return vfs.Fadvise(fd, 0, n, vfs.AdviseDontNeed) })
}
