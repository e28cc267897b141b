//go:build unix

package vfs

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

func (osFS) OpenDir(name string) (File, error) { return os.Open(name) }

// Lock uses flock(2). Locks belong to the open file description, so a second
// Lock of the same name fails even from within the same process.
func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, fmt.Errorf("lock %s: %w (%v)", name, ErrLocked, err)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, nil
}
