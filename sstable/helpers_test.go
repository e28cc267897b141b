package sstable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// memFile is a ReadableFile over a byte slice.
type memFile struct {
	*bytes.Reader
	closed bool
}

func (f *memFile) Close() error {
	f.closed = true
	return nil
}

func newMemFile(b []byte) *memFile { return &memFile{Reader: bytes.NewReader(b)} }

type kv struct {
	key   base.InternalKey
	value []byte
}

// genEntries returns n random entries sorted by InternalCompare: user keys
// from a small alphabet (so keys share prefixes and repeat), one to four
// versions each with decreasing sequence numbers, about one in eight a
// deletion.
func genEntries(rng *rand.Rand, n int) []kv {
	seen := map[string]bool{}
	var out []kv
	seq := base.SeqNum(1)
	for len(out) < n {
		kl := 1 + rng.IntN(12)
		k := make([]byte, kl)
		for i := range k {
			k[i] = "abcdeXYZ\x00\xff"[rng.IntN(10)]
		}
		if seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		versions := 1 + rng.IntN(4)
		for range versions {
			seq += base.SeqNum(1 + rng.IntN(3))
			kind := base.KindSet
			var v []byte
			if rng.IntN(8) == 0 {
				kind = base.KindDelete
			} else {
				v = make([]byte, rng.IntN(40))
				for i := range v {
					v[i] = byte('a' + rng.IntN(3)) // compressible
				}
				if rng.IntN(50) == 0 {
					v = make([]byte, 3000+rng.IntN(3000)) // spans blocks
					for i := range v {
						v[i] = byte(rng.Uint32())
					}
				}
			}
			out = append(out, kv{base.MakeInternalKey(k, seq, kind), v})
		}
	}
	slices.SortFunc(out, func(a, b kv) int { return base.InternalCompare(a.key, b.key) })
	return out
}

func buildTable(t testing.TB, entries []kv, opts WriterOptions) ([]byte, *Writer) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, opts)
	for _, e := range entries {
		if err := w.Add(e.key, e.value); err != nil {
			t.Fatalf("Add(%s): %v", e.key, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := w.Metadata().Size; got != uint64(buf.Len()) {
		t.Fatalf("Metadata.Size = %d, file has %d bytes", got, buf.Len())
	}
	return buf.Bytes(), w
}

func openTable(t testing.TB, data []byte, opts ReaderOptions) *Reader {
	t.Helper()
	r, err := NewReader(newMemFile(data), int64(len(data)), opts)
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	return r
}

func fmtKV(k base.InternalKey, v []byte) string {
	if len(v) > 16 {
		return fmt.Sprintf("%s=%q...(%d)", k, v[:16], len(v))
	}
	return fmt.Sprintf("%s=%q", k, v)
}
