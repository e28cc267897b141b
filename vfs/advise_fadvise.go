//go:build linux && (amd64 || arm64)

package vfs

// advisedFile is an OS file advised for random reads, which prefetches.
type advisedFile struct {
	File
}

func adviseRandomReads(f File) File {
	if !WithFD(f, func(fd uintptr) bool { return Fadvise(fd, 0, 0, AdviseRandom) }) {
		return f // not an OS file: a test filesystem's
	}
	return &advisedFile{File: f}
}

// Prefetch asks the kernel to read [off, off+n) into the page cache
// (POSIX_FADV_WILLNEED), which it does in the background.
func (f *advisedFile) Prefetch(off, n int64) {
	WithFD(f.File, func(fd uintptr) bool { return Fadvise(fd, off, n, AdviseWillNeed) })
}
