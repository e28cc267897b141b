//go:build linux && (amd64 || arm64)

package vfs

import "syscall"

// WithFD runs fn with the file descriptor of f, an OS file, and returns
// what fn returns; false when f is not an OS file (a test filesystem's).
// The engine's system calls on its files (fadvise, sync_file_range,
// pwrite past a reused log's end) go through it.
func WithFD(f any, fn func(fd uintptr) bool) bool {
	sc, ok := f.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	if err := rc.Control(func(fd uintptr) { ok = fn(fd) }); err != nil {
		return false
	}
	return ok
}

// Advice is a posix_fadvise(2) advice (linux/fadvise.h).
type Advice uintptr

const (
	AdviseRandom   Advice = 1 // no readahead
	AdviseWillNeed Advice = 3 // read the range into the page cache, in the background
	AdviseDontNeed Advice = 4 // drop the range's clean pages from the page cache
)

// Fadvise gives advice about bytes [off, off+n) of the file open on fd
// (n = 0: to its end) and reports whether the call succeeded.
func Fadvise(fd uintptr, off, n int64, advice Advice) bool {
	_, _, errno := syscall.Syscall6(syscall.SYS_FADVISE64, fd, uintptr(off), uintptr(n), uintptr(advice), 0, 0)
	return errno == 0
}
