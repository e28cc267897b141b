package sstable

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// FuzzBlock feeds arbitrary block contents to the block decoders, as if
// they had passed their checksum: the iterator, the point lookup and the
// index, properties and filter parsers. They must report corruption, never
// panic or loop, and forward and reverse iteration must agree.
// (fuzz.FuzzSSTableReader covers whole files, where checksums stop most
// mutations before they reach these decoders.)
func FuzzBlock(f *testing.F) {
	b := blockBuilder{restartInterval: 3}
	for i, k := range []string{"apple", "apricot", "banana", "band", "bandana", "cherry", "cherry2"} {
		b.add(base.MakeInternalKey([]byte(k), base.SeqNum(10-i), base.KindSet).AppendEncoded(nil), []byte(k+"-value"))
	}
	f.Add(bytes.Clone(b.finish()), []byte("band"))
	var p Properties
	p.NumEntries = 3
	p.Smallest = base.MakeInternalKey([]byte("a"), 1, base.KindSet)
	f.Add(p.encode(), []byte("a"))
	f.Add([]byte{0, 0, 0, 0}, []byte{})
	f.Fuzz(func(t *testing.T, data, search []byte) {
		var it blockIter
		if err := it.init(data); err == nil {
			maxEntries := len(data)/3 + 1
			var fwd [][]byte
			for ok := it.first(); ok; ok = it.next() {
				fwd = append(fwd, bytes.Clone(it.key))
				if len(fwd) > maxEntries {
					t.Fatalf("more than %d entries in %d bytes", maxEntries, len(data))
				}
			}
			fwdErr := it.err
			var it2 blockIter
			if err := it2.init(data); err != nil {
				t.Fatal("init not deterministic")
			}
			var rev [][]byte
			for ok := it2.last(); ok; ok = it2.prev() {
				rev = append(rev, bytes.Clone(it2.key))
				if len(rev) > maxEntries {
					t.Fatalf("more than %d entries in %d bytes backwards", maxEntries, len(data))
				}
			}
			for _, err := range []error{fwdErr, it2.err} {
				if err != nil && !errors.Is(err, base.ErrCorruption) {
					t.Fatalf("error %v is not corruption", err)
				}
			}
			if fwdErr == nil && it2.err == nil {
				if len(fwd) != len(rev) {
					t.Fatalf("%d entries forward, %d backward", len(fwd), len(rev))
				}
				for i := range fwd {
					if !bytes.Equal(fwd[i], rev[len(rev)-1-i]) {
						t.Fatalf("entry %d differs forward and backward", i)
					}
				}
			}
			sk := seekKey(search)
			if it.seekGE(sk) {
				for i := 0; i < 3 && it.prev(); i++ {
				}
			}
			if it.seekLT(sk) {
				for i := 0; i < 3 && it.next(); i++ {
				}
			}
			if _, _, _, err := getInBlock(data, base.MakeSearchKey(search, 5)); err != nil && !errors.Is(err, base.ErrCorruption) {
				t.Fatalf("getInBlock: %v", err)
			}
		}
		if _, err := decodeIndex(data, 1<<40); err != nil && !errors.Is(err, base.ErrCorruption) {
			t.Fatalf("decodeIndex: %v", err)
		}
		if _, err := decodeProperties(data); err != nil && !errors.Is(err, base.ErrCorruption) {
			t.Fatalf("decodeProperties: %v", err)
		}
		if f, err := decodeFilter(data); err == nil {
			f.mayContain(keyHash(search))
		} else if !errors.Is(err, base.ErrCorruption) {
			t.Fatalf("decodeFilter: %v", err)
		}
	})
}
