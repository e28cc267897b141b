package vfs

import (
	"errors"
	"os"
)

// ErrLocked is what Lock returns, wrapped, when another process or an
// open DB holds the lock.
var ErrLocked = errors.New("held by another process or an open DB")

type osFS struct{}

func (osFS) Create(name string) (File, error) {
	return os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
}

func (osFS) Open(name string) (File, error) { return os.Open(name) }

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

func (osFS) Reuse(oldname, newname string) (File, error) {
	if err := os.Rename(oldname, newname); err != nil {
		return nil, err
	}
	return os.OpenFile(newname, os.O_RDWR, 0)
}

func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

func (osFS) List(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func (osFS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

// Link implements Linker with a hard link (link(2), CreateHardLink on
// Windows).
func (osFS) Link(oldname, newname string) error { return os.Link(oldname, newname) }
