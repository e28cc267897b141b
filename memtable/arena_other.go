//go:build !linux

package memtable

// adviseHugePages does nothing: transparent huge pages are a Linux feature.
func adviseHugePages([]byte) {}
