package wal

import (
	"runtime"
	"testing"
)

// TestBlocksLiveOutsideTheHeap: a burst of blocks (MaxBuffered's worth)
// does not grow the Go heap, so it raises no collector headroom; blocks a
// pool does not keep are unmapped, and the pool's own are reused.
func TestBlocksLiveOutsideTheHeap(t *testing.T) {
	const n = DefaultMaxBuffered / BlockSize
	pool := NewBlockPool(2 * BlockSize)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	blocks := make([]*block, n)
	for i := range blocks {
		blocks[i] = pool.get()
		if !blocks[i].mem.Mapped() {
			t.Fatal("a block was allocated on the heap")
		}
		blocks[i].buf[BlockSize-1] = 1 // touched: resident
	}
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > DefaultMaxBuffered/8 {
		t.Fatalf("%d blocks of %d bytes grew the heap by %d bytes", n, BlockSize, grew)
	}
	for _, b := range blocks {
		pool.put(b)
	}
	if len(pool.free) != pool.max {
		t.Fatalf("the pool keeps %d blocks, want its bound %d", len(pool.free), pool.max)
	}
	kept := pool.free[len(pool.free)-1]
	if b := pool.get(); b != kept || b.n != 0 || b.written != 0 {
		t.Fatal("a kept block was not reused empty")
	}
}
