package vfs

import "io"

// DirectFile is a file open for writing with direct I/O (OpenDirect).
type DirectFile interface {
	io.WriterAt
	io.Closer
	Sync() error
}

// OpenDirect opens f, an OS file, a second time, for writing with direct
// I/O (O_DIRECT): writes through it go to the disk past the page cache,
// so that a sync of f waits for none of them. Each write must be aligned
// to the filesystem's block size in its offset, its length and its memory
// (a page is). ok is false where the platform or the filesystem (tmpfs)
// has no direct I/O, and for a file of another filesystem than the OS's.
// Closing the returned file leaves f open.
func OpenDirect(f any) (direct DirectFile, ok bool) {
	return openDirect(f)
}
