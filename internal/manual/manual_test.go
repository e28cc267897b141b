package manual

import (
	"testing"
	"unsafe"
)

// TestNew checks sizes, zeroing, alignment and where the memory comes
// from on either side of the mapping threshold, and that the carved
// views alias the buffer.
func TestNew(t *testing.T) {
	for _, n := range []int{0, 1, 7, 100, minMapped - 1, minMapped, 1 << 20} {
		m := New(n)
		b := m.Bytes()
		if len(b) != n {
			t.Fatalf("New(%d): %d bytes", n, len(b))
		}
		for i, c := range b {
			if c != 0 {
				t.Fatalf("New(%d): byte %d is %d", n, i, c)
			}
		}
		if n > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
			t.Errorf("New(%d) is not 8-byte aligned", n)
		}
		if wantMapped := n >= minMapped && mapsHere; m.mapped != wantMapped {
			t.Errorf("New(%d): mapped %v, want %v", n, m.mapped, wantMapped)
		}
		if n >= 64 {
			words, rest := Uint64s(b, 4)
			halves, rest2 := Uint32s(rest, 2)
			words[3], halves[1] = 1<<63|5, 7
			if b[31] != 0x80 || b[24] != 5 || b[36] != 7 || len(rest2) != n-40 {
				t.Errorf("New(%d): views do not alias the buffer", n)
			}
		}
		m.Free()
	}
}

// TestCarveBounds: carving past the buffer's end panics instead of
// reading memory that is not the buffer's.
func TestCarveBounds(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Uint64s past the end did not panic")
		}
	}()
	Uint64s(New(15).Bytes(), 2)
}
