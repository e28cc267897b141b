//go:build !linux

package memtable

// adviseHugePages does nothing: transparent huge pages are a Linux feature.
func adviseHugePages([]byte) {}

// mapMemory maps nothing: elsewhere than Linux arenas stay on the heap.
func mapMemory(int) ([]byte, bool) { return nil, false }

// unmapMemory is never called: nothing is mapped.
func unmapMemory([]byte) {}
