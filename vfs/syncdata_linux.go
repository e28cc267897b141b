//go:build linux && (amd64 || arm64)

package vfs

import (
	"fmt"
	"syscall"
)

// dataSyncer runs fdatasync(2) on an OS file's descriptor.
type dataSyncer struct {
	rc      syscall.RawConn
	control func(fd uintptr) // s.fdatasync, bound once
	err     error
}

// dataSync returns an fdatasync of f, or nil when f is not an OS file.
// It binds the descriptor's RawConn and the function run on it once,
// where WithFD would make both again, and allocate, at every call.
func dataSync(f any) func() error {
	sc, ok := f.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	s := &dataSyncer{rc: rc}
	s.control = s.fdatasync
	return s.sync
}

func (s *dataSyncer) fdatasync(fd uintptr) {
	for {
		s.err = syscall.Fdatasync(int(fd))
		if s.err != syscall.EINTR {
			return
		}
	}
}

func (s *dataSyncer) sync() error {
	s.err = nil
	if err := s.rc.Control(s.control); err != nil {
		return err // the file is closed
	}
	if s.err != nil {
		return fmt.Errorf("fdatasync: %w", s.err)
	}
	return nil
}
