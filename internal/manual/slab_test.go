package manual

import (
	"bytes"
	"sync"
	"testing"
)

func TestSlabClasses(t *testing.T) {
	lastClass, lastSize := 0, minSlabClass
	for n := 1; n <= maxSlabClass; n++ {
		class, size := slabClass(n)
		if class < 0 || class >= slabClasses {
			t.Fatalf("slabClass(%d) = class %d, outside [0, %d)", n, class, slabClasses)
		}
		if size < n {
			t.Fatalf("slabClass(%d): size %d is too small", n, size)
		}
		if n > minSlabClass && (size-n)*8 > size {
			t.Fatalf("slabClass(%d): size %d wastes more than an eighth", n, size)
		}
		if class < lastClass || (class == lastClass) != (size == lastSize) {
			t.Fatalf("slabClass(%d) = (%d, %d) after (%d, %d)", n, class, size, lastClass, lastSize)
		}
		if class2, size2 := slabClass(size); class2 != class || size2 != size {
			t.Fatalf("slabClass(%d) = (%d, %d), but its size's class is (%d, %d)", n, class, size, class2, size2)
		}
		lastClass, lastSize = class, size
	}
	if lastClass != slabClasses-1 || lastSize != maxSlabClass {
		t.Fatalf("the largest class is (%d, %d), want (%d, %d)", lastClass, lastSize, slabClasses-1, maxSlabClass)
	}
	if class, _ := slabClass(maxSlabClass + 1); class != -1 {
		t.Fatalf("slabClass(max+1) = %d, want -1", class)
	}
}

func TestSlabReusesFreedBuffers(t *testing.T) {
	s := NewSlab()
	defer s.Close()
	var bufs []Buf
	for i := range 300 { // more 4.2 KiB buffers than one chunk holds
		b := s.Alloc(4200)
		if len(b.Bytes()) != 4200 || cap(b.Bytes()) != 4608 {
			t.Fatalf("Alloc(4200): len %d cap %d", len(b.Bytes()), cap(b.Bytes()))
		}
		for j := range b.Bytes() {
			b.Bytes()[j] = byte(i)
		}
		bufs = append(bufs, b)
	}
	for i, b := range bufs {
		if !bytes.Equal(b.Bytes(), bytes.Repeat([]byte{byte(i)}, 4200)) {
			t.Fatalf("buffer %d was overwritten by another", i)
		}
	}
	st := s.Stats()
	if st.InUse != 300*4608 || st.Mapped != 2*slabChunkSize {
		t.Fatalf("stats %+v, want %d in use in two chunks", st, 300*4608)
	}
	for _, b := range bufs {
		s.Free(b)
	}
	for range 300 {
		s.Alloc(4500) // the same class
	}
	if st := s.Stats(); st.Mapped != 2*slabChunkSize {
		t.Fatalf("after reuse %+v: freed slots were not reused", st)
	}
}

func TestSlabLargeBuffers(t *testing.T) {
	s := NewSlab()
	b := s.Alloc(maxSlabClass + 1)
	if len(b.Bytes()) != maxSlabClass+1 || b.slab {
		t.Fatalf("large Alloc: len %d, slab %v", len(b.Bytes()), b.slab)
	}
	if st := s.Stats(); st.InUse != maxSlabClass+1 || st.Mapped != 0 {
		t.Fatalf("stats %+v", st)
	}
	s.Free(b)
	if st := s.Stats(); st.InUse != 0 {
		t.Fatalf("stats after Free %+v", st)
	}
	// An empty buffer (a damaged block claiming no bytes) is a small one.
	if z := s.Alloc(0); len(z.Bytes()) != 0 || !z.slab {
		t.Fatalf("Alloc(0): len %d, slab %v", len(z.Bytes()), z.slab)
	} else {
		s.Free(z)
	}
	s.Close()
}

func TestSlabCloseWaitsForBuffersInUse(t *testing.T) {
	s := NewSlab()
	a, b := s.Alloc(1000), s.Alloc(100000)
	a.Bytes()[999] = 7
	s.Close()
	if st := s.Stats(); st.Mapped == 0 {
		t.Fatal("Close unmapped chunks with a buffer in use")
	}
	if a.Bytes()[999] != 7 {
		t.Fatal("a buffer in use changed at Close")
	}
	s.Free(a)
	if st := s.Stats(); st.Mapped == 0 {
		t.Fatal("chunks unmapped with a buffer still in use")
	}
	s.Free(b)
	if st := s.Stats(); st.Mapped != 0 || st.InUse != 0 {
		t.Fatalf("after the last Free %+v, want nothing mapped", st)
	}
}

func TestSlabConcurrentUse(t *testing.T) {
	s := NewSlab()
	defer s.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []Buf
			for i := range 2000 {
				n := 1 + (i*7919+g*104729)%20000
				b := s.Alloc(n)
				b.Bytes()[0], b.Bytes()[n-1] = byte(g), byte(g)
				held = append(held, b)
				if len(held) > 20 {
					old := held[0]
					if o := old.Bytes(); o[0] != byte(g) || o[len(o)-1] != byte(g) {
						t.Errorf("goroutine %d: a buffer was written by another", g)
						return
					}
					s.Free(old)
					held = held[1:]
				}
			}
			for _, b := range held {
				s.Free(b)
			}
		}()
	}
	wg.Wait()
	if st := s.Stats(); st.InUse != 0 {
		t.Fatalf("stats %+v after every buffer was freed", st)
	}
}
