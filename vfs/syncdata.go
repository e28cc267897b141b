package vfs

// DataSync returns a function that makes what was written to f durable,
// as f.Sync does, together with the metadata a read of it needs (its
// size, its blocks) but not the rest (its times): fdatasync(2) on an OS
// file where the platform has it, f.Sync elsewhere and on a test
// filesystem's files. A log that writes over blocks it allocated before (a
// reused or zero-filled file) changes only its modification time, which
// an fsync, on a journaling filesystem such as ext4, commits to the
// journal; fdatasync waits for the data and the disk's cache alone.
//
// Make it once per file and call it from one goroutine at a time: a call
// allocates nothing, for a log syncs on its commit path.
func DataSync(f interface{ Sync() error }) func() error {
	if sync := dataSync(f); sync != nil {
		return sync
	}
	return f.Sync
}
