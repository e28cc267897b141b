//go:build linux && (amd64 || arm64)

package wal

import "syscall"

// withFD runs fn with f's file descriptor and returns what fn returns,
// or false when f is not an OS file.
func withFD(f SyncFile, fn func(fd uintptr) bool) bool {
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
