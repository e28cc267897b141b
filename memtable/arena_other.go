//go:build !linux

package memtable

import "sync/atomic"

// adviseHugePages does nothing: transparent huge pages are a Linux feature.
func adviseHugePages([]byte) {}

// mapArena reports no mapping: elsewhere than on Linux arenas stay on the
// Go heap.
func mapArena(int) ([]byte, bool) { return nil, false }

func unmapArena([]byte) {}

type populator struct{}

func startPopulating([]byte, *atomic.Uint64) *populator { return nil }

func (*populator) nudge(uint64) {}

func (*populator) halt() {}
