//go:build !(linux && (amd64 || arm64))

package vfs

func openDirect(any) (DirectFile, bool) { return nil, false }
