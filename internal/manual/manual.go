// Package manual allocates memory outside the Go heap for large buffers
// that live as long as an object with an explicit end, such as an open
// table's decoded index and bloom filter.
//
// The collector paces itself on the heap it manages: a heap holding a
// few hundred megabytes of such buffers lets garbage grow to as much
// again before a collection (at GOGC 100), so long-lived, pointer-free
// data costs about twice its size in resident memory. Memory from New
// costs its size. It must hold no Go pointers, and must not be used after
// Free. A Slab does the same for many smaller buffers of similar sizes,
// such as a block cache's blocks.
package manual

import "unsafe"

// minMapped is the smallest allocation made outside the heap: below it
// the page a mapping rounds up to would waste too large a share, and the
// heap's overhead on so little is small.
const minMapped = 16 << 10

// Buf is memory from New, or from a Slab's Alloc (which its Free, not
// Buf.Free, gives back).
type Buf struct {
	b      []byte
	mapped bool // outside the heap, to be unmapped by Free
	slab   bool // a Slab's, to be given back to it (Free does nothing)
}

// New returns n zeroed bytes, 8-byte aligned, outside the Go heap when n
// is large enough and the system grants a mapping, on the heap otherwise.
func New(n int) Buf {
	if n <= 0 {
		return Buf{}
	}
	if n >= minMapped {
		if b, ok := mapAnon(n); ok {
			return Buf{b: b, mapped: true}
		}
	}
	words := make([]uint64, (n+7)/8)
	return Buf{b: unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), n)}
}

// Bytes returns the buffer's memory.
func (m Buf) Bytes() []byte { return m.b }

// Mapped reports whether the memory is outside the heap.
func (m Buf) Mapped() bool { return m.mapped }

// Free returns mapped memory to the system; heap memory is left to the
// collector. The buffer must not be used afterwards.
func (m Buf) Free() {
	if m.mapped {
		unmapAnon(m.b)
	}
}

// Uint64s carves n uint64s from the front of b, which must be 8-byte
// aligned, and returns them with the rest of b.
func Uint64s(b []byte, n int) ([]uint64, []byte) {
	if n == 0 {
		return nil, b
	}
	_ = b[8*n-1] // bounds check before the unsafe view
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n), b[8*n:]
}

// Uint32s carves n uint32s from the front of b, which must be 4-byte
// aligned, and returns them with the rest of b.
func Uint32s(b []byte, n int) ([]uint32, []byte) {
	if n == 0 {
		return nil, b
	}
	_ = b[4*n-1]
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), n), b[4*n:]
}
