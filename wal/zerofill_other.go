//go:build !(linux && (amd64 || arm64))

package wal

// zeroFill reports false: appends grow the file.
func zeroFill(SyncFile, int64, int64) bool { return false }

// dropCache reports false: the reused file's cached pages stay.
func dropCache(SyncFile, int64) bool { return false }
