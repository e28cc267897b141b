//go:build !(linux && (amd64 || arm64))

package vfs

func startWriteback(any, int64, int64) bool { return false }
