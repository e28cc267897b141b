//go:build linux && (amd64 || arm64)

package vfs

import (
	"syscall"
)

// posix_fadvise's advice values (linux/fadvise.h).
const (
	fadvRandom   = 1
	fadvWillNeed = 3
)

// advisedFile is an OS file advised for random reads, with its
// descriptor's raw connection for the prefetches.
type advisedFile struct {
	File
	conn syscall.RawConn
}

func adviseRandomReads(f File) File {
	sc, ok := f.(syscall.Conn)
	if !ok {
		return f // not an OS file: a test filesystem's
	}
	conn, err := sc.SyscallConn()
	if err != nil || fadvise(conn, 0, 0, fadvRandom) != nil {
		return f
	}
	return &advisedFile{File: f, conn: conn}
}

// Prefetch asks the kernel to read [off, off+n) into the page cache
// (POSIX_FADV_WILLNEED), which it does in the background.
func (f *advisedFile) Prefetch(off, n int64) {
	_ = fadvise(f.conn, off, n, fadvWillNeed)
}

// fadvise calls posix_fadvise on conn's descriptor.
func fadvise(conn syscall.RawConn, off, n int64, advice int) error {
	var errno syscall.Errno
	err := conn.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_FADVISE64, fd, uintptr(off), uintptr(n), uintptr(advice), 0, 0)
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
