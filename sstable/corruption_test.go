package sstable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/internal/base"
)

func corruptionTable(t *testing.T, comp Compression) ([]byte, []kv) {
	t.Helper()
	var all []kv
	for i := range 2000 {
		k := fmt.Appendf(nil, "pk%03d|row%05d", i/20, i)
		all = append(all, kv{base.MakeInternalKey(k, base.SeqNum(i+1), base.KindSet), fmt.Appendf(nil, "value-%d-%d", i, i*i)})
	}
	data, _ := buildTable(t, all, WriterOptions{Compression: comp, Split: splitAtBar})
	return data, all
}

func readFooterForTest(t *testing.T, data []byte) footer {
	t.Helper()
	ft, err := decodeFooter(data[len(data)-footerLen:], uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	return ft
}

func TestCorruptDataBlock(t *testing.T) {
	for _, comp := range []Compression{NoCompression, S2Compression, ZstdCompression} {
		t.Run(comp.String(), func(t *testing.T) {
			data, all := corruptionTable(t, comp)
			r := openTable(t, data, ReaderOptions{})
			second := r.index.handle(1)
			firstSep := r.index.separator(0, nil)
			r.Close()

			for _, pos := range []uint64{second.offset, second.offset + second.length/2, second.offset + second.length /* type byte */, second.end() - 1} {
				bad := slices.Clone(data)
				bad[pos] ^= 0x40
				r, err := NewReader(newMemFile(bad), int64(len(bad)), ReaderOptions{FileNum: 123})
				if err != nil {
					t.Fatalf("NewReader failed on a damaged data block: %v", err)
				}
				wantMsg := fmt.Sprintf("sstable 000123: block at offset %d", second.offset)

				it := r.NewIter(nil, nil)
				n := 0
				for ok := it.First(); ok; ok = it.Next() {
					n++
				}
				checkCorruption(t, "forward iteration", it.Close(), wantMsg)
				if n >= len(all) {
					t.Fatalf("forward iteration read all %d entries", n)
				}

				// Reverse iteration from the end must hit it too.
				it = r.NewIter(nil, nil)
				n = 0
				for ok := it.Last(); ok; ok = it.Prev() {
					n++
				}
				checkCorruption(t, "reverse iteration", it.Close(), wantMsg)
				if n >= len(all) {
					t.Fatalf("reverse iteration read all %d entries", n)
				}

				// Get of a key stored in the damaged block: the first
				// one after the first block's separator.
				var target []byte
				for _, e := range all {
					if base.InternalCompare(e.key, firstSep) > 0 {
						target = e.key.UserKey
						break
					}
				}
				var v Value
				v, _, err = r.Get(target, base.SeqNumMax)
				v.Release()
				checkCorruption(t, "Get", err, wantMsg)
				r.Close()
			}
		})
	}
}

func checkCorruption(t *testing.T, what string, err error, wantMsg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if !errors.Is(err, base.ErrCorruption) {
		t.Fatalf("%s: error %v does not wrap ErrCorruption", what, err)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("%s: error %q does not contain %q", what, err, wantMsg)
	}
}

func TestCorruptMetaBlocks(t *testing.T) {
	for _, comp := range []Compression{NoCompression, ZstdCompression} {
		data, _ := corruptionTable(t, comp)
		ft := readFooterForTest(t, data)
		regions := map[string]blockHandle{
			"index":      ft.index,
			"filter":     ft.filter,
			"properties": ft.properties,
			"footer":     {offset: uint64(len(data)) - footerLen, length: footerLen - blockTrailerLen},
		}
		for name, h := range regions {
			for _, pos := range []uint64{h.offset, h.offset + h.length/3, h.offset + h.length/2, h.end() - 1} {
				bad := slices.Clone(data)
				bad[pos] ^= 0x01
				_, err := NewReader(newMemFile(bad), int64(len(bad)), ReaderOptions{FileNum: 9})
				if err == nil {
					t.Fatalf("%s: NewReader succeeded with %s byte %d flipped", comp, name, pos)
				}
				if !errors.Is(err, base.ErrCorruption) || !strings.Contains(err.Error(), "sstable 000009") {
					t.Fatalf("%s: %s byte %d flipped: error %v", comp, name, pos, err)
				}
				if name != "footer" && !strings.Contains(err.Error(), fmt.Sprintf("%s block at offset %d", name, h.offset)) {
					t.Fatalf("%s: %s byte %d flipped: error %q does not name the block", comp, name, pos, err)
				}
			}
		}
	}
}

func TestTruncatedFile(t *testing.T) {
	data, _ := corruptionTable(t, S2Compression)
	for _, n := range []int{0, 1, footerLen - 1, footerLen, len(data) / 2, len(data) - footerLen, len(data) - 1} {
		_, err := NewReader(newMemFile(data[:n]), int64(n), ReaderOptions{FileNum: 5})
		if err == nil || !errors.Is(err, base.ErrCorruption) {
			t.Errorf("truncated to %d bytes: error %v", n, err)
		}
	}
	// The caller claims a bigger size than the file has.
	_, err := NewReader(newMemFile(data[:len(data)-10]), int64(len(data)), ReaderOptions{FileNum: 5})
	if err == nil || !errors.Is(err, base.ErrCorruption) || !strings.Contains(err.Error(), "sstable 000005") {
		t.Errorf("short file: error %v", err)
	}
}

func TestBadFormatVersion(t *testing.T) {
	data, _ := corruptionTable(t, NoCompression)
	ft := readFooterForTest(t, data)
	ft.version = 2
	bad := append(slices.Clone(data[:len(data)-footerLen]), ft.encode()...)
	_, err := NewReader(newMemFile(bad), int64(len(bad)), ReaderOptions{})
	if err == nil || !strings.Contains(err.Error(), "unsupported format version 2") {
		t.Fatalf("error %v", err)
	}
}

// TestMalformedBlockWithValidChecksum feeds block contents that pass the
// checksum but do not decode: the reader must report corruption, not panic.
func TestMalformedBlockWithValidChecksum(t *testing.T) {
	data, _ := corruptionTable(t, NoCompression)
	r := openTable(t, data, ReaderOptions{})
	h := r.index.handle(0)
	r.Close()
	for _, mutate := range []func(b []byte){
		func(b []byte) { b[0] = 0xff },                                        // shared > 0 at a restart
		func(b []byte) { b[1] = 0xff; b[2] = 0xff },                           // unshared past the end
		func(b []byte) { binary.LittleEndian.PutUint32(b[len(b)-4:], 1<<30) }, // restart count
		func(b []byte) { binary.LittleEndian.PutUint32(b[len(b)-8:], 3) },     // last restart misaligned
	} {
		bad := slices.Clone(data)
		block := bad[h.offset : h.offset+h.length]
		mutate(block)
		sum := binary.LittleEndian.AppendUint64(nil, xxhashBlock(bad[h.offset:h.offset+h.length+1]))
		copy(bad[h.offset+h.length+1:], sum)
		r := openTable(t, bad, ReaderOptions{FileNum: 3})
		it := r.NewIter(nil, nil)
		for ok := it.First(); ok; ok = it.Next() {
		}
		err1 := it.Close()
		it = r.NewIter(nil, nil)
		for ok := it.Last(); ok; ok = it.Prev() {
		}
		err2 := it.Close()
		v, _, err3 := r.Get([]byte("pk000|row00003"), base.SeqNumMax)
		v.Release()
		for _, err := range []error{err1, err2, err3} {
			if err != nil && !errors.Is(err, base.ErrCorruption) {
				t.Fatalf("error %v does not wrap ErrCorruption", err)
			}
		}
		if err1 == nil && err2 == nil && err3 == nil {
			t.Fatalf("malformed block went unnoticed")
		}
		r.Close()
	}
}

func xxhashBlock(b []byte) uint64 { return xxhash.Sum64(b) }
