package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// OpenDir opens a directory whose Sync does nothing: Windows cannot flush
// a directory handle, and NTFS journals the entries a rename or a create
// makes in a directory, as the engine's directory syncs ask.
func (osFS) OpenDir(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return windowsDir{f}, nil
}

type windowsDir struct{ *os.File }

func (windowsDir) Sync() error { return nil }

var procLockFileEx = syscall.NewLazyDLL("kernel32.dll").NewProc("LockFileEx")

const (
	lockfileFailImmediately = 0x1
	lockfileExclusiveLock   = 0x2
	errorLockViolation      = syscall.Errno(33)
)

// Lock takes an exclusive LockFileEx lock on the whole of the file. Locks
// belong to the handle, so a second Lock of the same name fails even from
// within the same process.
func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	var ol syscall.Overlapped
	r, _, callErr := procLockFileEx.Call(f.Fd(), lockfileExclusiveLock|lockfileFailImmediately, 0, 1, 0, uintptr(unsafe.Pointer(&ol)))
	if r == 0 {
		f.Close()
		if errors.Is(callErr, errorLockViolation) {
			return nil, fmt.Errorf("lock %s: %w (%v)", name, ErrLocked, callErr)
		}
		return nil, fmt.Errorf("lock %s: %w", name, callErr)
	}
	return f, nil
}
