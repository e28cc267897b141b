package vfs

// StartWriteback starts the kernel writing bytes [off, off+n) of f back to
// the disk and returns at once, with sync_file_range(2) where the
// platform has it. It makes nothing durable (file metadata and the disk's
// own cache are left as they are): it spreads the disk writes of a file
// written in bulk over its writing, so that its closing fsync, and every
// other file's fsync queued behind it, has little left to wait for. It
// reports false when f is not an OS file, the platform cannot, or the
// call fails.
func StartWriteback(f any, off, n int64) bool {
	return startWriteback(f, off, n)
}
