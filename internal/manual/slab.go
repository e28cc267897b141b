package manual

import (
	"math/bits"
	"runtime"
	"sync"
)

// Slab size classes: up to minSlabClass bytes one class; above it, eight
// classes per doubling (a buffer wastes at most an eighth of its size),
// up to maxSlabClass. Larger buffers get a mapping of their own.
const (
	minSlabShift  = 9
	maxSlabShift  = 18
	minSlabClass  = 1 << minSlabShift // 512 B
	maxSlabClass  = 1 << maxSlabShift // 256 KiB
	slabSubShift  = 3                 // 1<<slabSubShift classes per doubling
	slabClasses   = 1 + (maxSlabShift-minSlabShift)<<slabSubShift
	slabChunkSize = 1 << 20
)

// Slab allocates pointer-free buffers of any size outside the Go heap,
// for many buffers of similar sizes that come and go, such as a block
// cache's blocks: New's page-rounded mapping per buffer would waste most
// of a small one and make one system call for each.
//
// A buffer's size is rounded up to its size class, and the class's slots
// are carved out of 1 MiB chunks mapped once. A freed buffer goes back to
// its class for the next one; chunks are unmapped only when the Slab is
// closed and every buffer freed (or, for a Slab dropped without Close,
// when it is collected: no buffer can then be in use, since each holds
// its Slab). So the mapped memory is the peak each class reached, about
// the peak in use while the sizes in use keep their mix.
//
// A Slab is safe for concurrent use.
type Slab struct {
	mu      sync.Mutex
	free    [slabClasses][][]byte
	chunks  *slabChunks
	inUse   int64 // bytes of the buffers handed out, rounded to their classes
	closed  bool
	cleanup runtime.Cleanup
}

// slabChunks is what a dropped Slab's cleanup unmaps: it must not reach
// the Slab itself.
type slabChunks struct {
	bufs   []Buf
	mapped int64
}

// NewSlab returns an empty Slab.
func NewSlab() *Slab {
	s := &Slab{chunks: &slabChunks{}}
	s.cleanup = runtime.AddCleanup(s, (*slabChunks).unmap, s.chunks)
	return s
}

func (c *slabChunks) unmap() {
	for _, b := range c.bufs {
		b.Free()
	}
	c.bufs, c.mapped = nil, 0
}

// slabClass returns the size class of an n-byte buffer and its size, or
// -1 for one too large for any class.
func slabClass(n int) (class, size int) {
	if n <= minSlabClass {
		return 0, minSlabClass
	}
	if n > maxSlabClass {
		return -1, n
	}
	k := bits.Len(uint(n - 1)) // 1<<(k-1) < n <= 1<<k
	step := 1 << (k - 1 - slabSubShift)
	sub := (n - 1<<(k-1) + step - 1) / step // 1..8
	class = (k-1-minSlabShift)<<slabSubShift + sub
	return class, 1<<(k-1) + sub*step
}

// Alloc returns a buffer of n bytes (n >= 0), whose capacity is its class's
// size. Its contents are whatever its last user left.
func (s *Slab) Alloc(n int) Buf {
	class, size := slabClass(n)
	if class < 0 {
		b := New(n)
		s.mu.Lock()
		s.inUse += int64(n)
		s.mu.Unlock()
		return b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	free := s.free[class]
	if len(free) == 0 {
		chunk := New(max(slabChunkSize, size))
		s.chunks.bufs = append(s.chunks.bufs, chunk)
		s.chunks.mapped += int64(len(chunk.Bytes()))
		for b := chunk.Bytes(); len(b) >= size; b = b[size:] {
			free = append(free, b[:size:size])
		}
	}
	b := free[len(free)-1]
	s.free[class] = free[:len(free)-1]
	s.inUse += int64(size)
	return Buf{b: b[:n], slab: true}
}

// Free returns a buffer from Alloc. The buffer must not be used after.
func (s *Slab) Free(b Buf) {
	if !b.slab {
		b.Free()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.slab {
		if poisonFreed {
			for i := range b.b {
				b.b[i] = poisonByte
			}
		}
		class, size := slabClass(cap(b.b))
		s.free[class] = append(s.free[class], b.b[:size:size])
		s.inUse -= int64(size)
	} else {
		s.inUse -= int64(len(b.b))
	}
	if s.closed && s.inUse == 0 {
		s.release()
	}
}

// Close unmaps the chunks, at once if no buffer is in use, else when the
// last one is freed. Alloc must not be called after it.
func (s *Slab) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.inUse == 0 {
		s.release()
	}
}

func (s *Slab) release() {
	s.cleanup.Stop()
	s.chunks.unmap()
	s.free = [slabClasses][][]byte{}
}

// SlabStats is a snapshot of a Slab's memory.
type SlabStats struct {
	// InUse is the bytes of the buffers handed out, each rounded up to
	// its class; Mapped the bytes of the chunks, in use or free.
	InUse, Mapped int64
}

// Stats returns the Slab's memory.
func (s *Slab) Stats() SlabStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SlabStats{InUse: s.inUse, Mapped: s.chunks.mapped}
}
