// Package vfs is the filesystem interface the engine writes through. The
// engine never calls package os directly, so tests can substitute a
// filesystem that injects errors (ErrorFS), simulates a crash
// (MemFS.CrashClone) or holds an fsync at a chosen moment (SyncGate).
package vfs

import (
	"io"
	"os"
	"path/filepath"
)

// File is an open file. Files opened for reading are safe for concurrent
// ReadAt calls; writes are made by one goroutine at a time.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Closer
	// Sync makes everything written so far durable.
	Sync() error
	// Stat returns the file's metadata.
	Stat() (os.FileInfo, error)
}

// FS is a filesystem. Names are paths as package filepath builds them.
type FS interface {
	// Create creates or truncates a file for writing.
	Create(name string) (File, error)
	// Open opens a file for reading.
	Open(name string) (File, error)
	// OpenDir opens a directory so that Sync makes its entries (created,
	// renamed and removed names) durable.
	OpenDir(name string) (File, error)
	// Remove deletes a file.
	Remove(name string) error
	// Rename atomically replaces newname with oldname.
	Rename(oldname, newname string) error
	// Reuse renames oldname to newname and opens it for writing from its
	// start, keeping its contents until the writes replace them: a log
	// whose records tell its own from an older log's
	// (wal.WriterOptions.LogNum) reuses a retired log's file, which
	// saves the filesystem the block allocation, and the journal commit
	// at every fsync, that appending to a new file costs. The new name
	// is durable once its directory is synced. Reuse only a file that
	// was synced whole and that nothing else reads or links.
	Reuse(oldname, newname string) (File, error)
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the names (not paths) of a directory's entries.
	List(dir string) ([]string, error)
	// Stat returns a file's metadata.
	Stat(name string) (os.FileInfo, error)
	// Lock takes an exclusive lock on name, creating it if needed, and
	// fails at once if anyone (this or another process) holds it. Closing
	// the returned Closer releases the lock.
	Lock(name string) (io.Closer, error)
}

// Default returns the operating system's filesystem.
func Default() FS { return osFS{} }

// SyncDir fsyncs a directory so that changes to its entries are durable.
func SyncDir(fs FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// ReadFile reads a small file whole, at most limit bytes of it: the
// counterpart of WriteFileAtomic for a file that is read at start and
// must not be allowed to grow the reader's memory without bound.
func ReadFile(fs FS, name string, limit int64) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// WriteFileAtomic replaces the file name with data atomically and
// durably: it writes name+".tmp", syncs it, renames it over name and syncs
// the directory, so a crash leaves the old content or the new, never a mix
// or neither. The temporary file is removed if a step fails.
func WriteFileAtomic(fs FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, name)
	}
	if err != nil {
		fs.Remove(tmp)
		return err
	}
	return SyncDir(fs, filepath.Dir(name))
}

// Linker is implemented by filesystems that can give a file a second name
// (a hard link): both names then share one content, and removing either
// leaves the other. The OS filesystem implements it; callers fall back to
// copying when an FS does not, or when Link fails (e.g. across devices).
type Linker interface {
	// Link creates newname as a hard link to oldname.
	Link(oldname, newname string) error
}
