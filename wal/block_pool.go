package wal

import (
	"runtime"
	"sync"

	"github.com/tabuladb/tabula/internal/manual"
)

// BlockPool recycles the in-memory blocks of Writers (BlockSize bytes
// each). A Writer takes a block to fill and gives it back once written
// out; a pool shared by the Writers of a log's successive segments
// (WriterOptions.Blocks) lets each new segment reuse its predecessor's
// blocks. Without it, a DB that starts a segment at every memtable
// rotation allocated up to MaxBuffered of blocks per segment, most of its
// write path's garbage. Safe for concurrent use.
type BlockPool struct {
	mu   sync.Mutex
	free []*block
	max  int
}

// NewBlockPool returns a pool that keeps up to maxBytes of free blocks (at
// least two); blocks given back beyond that are freed, so that a burst,
// or one huge record, does not pin its memory for good.
func NewBlockPool(maxBytes int) *BlockPool {
	return &BlockPool{max: max(2, maxBytes/BlockSize+2)}
}

// get returns an empty block, recycled if one is free.
func (p *BlockPool) get() *block {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		b.n, b.written = 0, 0
		return b
	}
	return newBlock()
}

func newBlock() *block {
	m := manual.New(BlockSize)
	b := &block{buf: m.Bytes(), mem: m}
	if m.Mapped() {
		b.cleanup = runtime.AddCleanup(b, manual.Buf.Free, m)
	}
	return b
}

// put gives back a block no Writer uses any more.
func (p *BlockPool) put(b *block) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < p.max {
		p.free = append(p.free, b)
		return
	}
	b.cleanup.Stop()
	b.mem.Free()
}
