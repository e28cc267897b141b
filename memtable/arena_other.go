//go:build !linux

package memtable

import "sync/atomic"

// adviseHugePages does nothing: transparent huge pages are a Linux feature.
func adviseHugePages([]byte) {}

type populator struct{}

func startPopulating([]byte, *atomic.Uint64) *populator { return nil }

func (*populator) nudge(uint64) {}

func (*populator) halt() {}
