//go:build !(linux && (amd64 || arm64))

package vfs

func adviseRandomReads(f File) File { return f }
