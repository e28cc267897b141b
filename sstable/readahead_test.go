package sstable

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// prefetchingFile records the prefetches asked of it, and its reads,
// each with whether the prefetches asked before it covered it.
type prefetchingFile struct {
	*memFile
	asked [][2]int64 // offset and length of each prefetch
	reads []bool     // per read: covered by a prefetch asked before it
}

func (f *prefetchingFile) Prefetch(off, n int64) { f.asked = append(f.asked, [2]int64{off, n}) }

func (f *prefetchingFile) ReadAt(p []byte, off int64) (int, error) {
	covered := false
	for _, a := range f.asked {
		covered = covered || a[0] <= off && off+int64(len(p)) <= a[0]+a[1]
	}
	// The prefetches are contiguous (checked below): a read across two
	// of them is covered by their union.
	if len(f.asked) > 0 {
		first, last := f.asked[0], f.asked[len(f.asked)-1]
		covered = covered || first[0] <= off && off+int64(len(p)) <= last[0]+last[1]
	}
	f.reads = append(f.reads, covered)
	return f.memFile.ReadAt(p, off)
}

// TestReadahead: an iterator reading a table's blocks from the file in
// order asks for the range ahead, in windows growing from 8 KiB to
// 256 KiB that never overlap, so that every block past the first three
// was asked for before it was read; a point read asks for nothing, nor does
// an iterator reading two blocks, nor one that jumps about; blocks found
// in the block cache are not counted as reads.
func TestReadahead(t *testing.T) {
	all, data, f, r := readaheadTable(t)
	scan := func(it base.InternalIterator) int {
		t.Helper()
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return n
	}

	f.reads = nil // the footer, index and filter
	if n := scan(r.NewCompactionIter()); n != len(all) {
		t.Fatalf("the compaction read %d entries, want %d", n, len(all))
	}
	end := f.asked[0][0]
	for _, a := range f.asked {
		if a[0] != end || a[1] > prefetchMax {
			t.Fatalf("prefetch of %d at %d, want it to start where the last ended, %d, and ask for at most %d (asked %v)", a[1], a[0], end, prefetchMax, f.asked)
		}
		end = a[0] + a[1]
	}
	if f.asked[0][1] > readaheadMin || len(f.asked) < 4 {
		t.Fatalf("prefetches %v: want several, the first of at most %d", f.asked, readaheadMin)
	}
	if dataEnd := r.index.handle(r.index.len() - 1); end != int64(dataEnd.offset+dataEnd.length+blockTrailerLen) {
		t.Fatalf("the prefetches end at %d, want the end of the data blocks, %d", end, dataEnd.offset+dataEnd.length+blockTrailerLen)
	}
	if len(f.reads) != r.index.len() {
		t.Fatalf("the compaction made %d reads of %d blocks", len(f.reads), r.index.len())
	}
	for i, covered := range f.reads {
		if covered != (i >= readaheadAfter) {
			t.Fatalf("block %d of %d read with a prefetch asked for it: %v, want %v", i, len(f.reads), covered, i >= readaheadAfter)
		}
	}

	f.asked = nil
	if v, found, err := r.Get([]byte("key010000"), base.SeqNumMax); err != nil || !found {
		t.Fatalf("Get: %v %v", found, err)
	} else {
		v.Release()
	}
	if n := scan(r.NewIter([]byte("key010000"), []byte("key010040"))); n != 40 || len(f.asked) != 0 {
		t.Fatalf("a point read and a two-block scan read %d entries and asked for %v, want 40 and nothing", n, f.asked)
	}
	it := r.NewIter(nil, nil)
	for i := 0; i < 20000; i += 1000 {
		if !it.SeekGE(fmt.Appendf(nil, "key%06d", i)) {
			t.Fatalf("SeekGE key%06d: %v", i, it.Error())
		}
	}
	if err := it.Close(); err != nil || len(f.asked) != 0 {
		t.Fatalf("seeks 1,000 keys apart asked for %v (%v), want nothing", f.asked, err)
	}

	cache := NewCache(64 << 20)
	cached, err := NewReader(f, int64(len(data)), ReaderOptions{Cache: cache, FileNum: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cached.Close()
	scan(cached.NewIter(nil, nil)) // fills the cache
	f.asked = nil
	if scan(cached.NewIter(nil, nil)); len(f.asked) != 0 {
		t.Fatalf("a scan of cached blocks asked for %v, want nothing", f.asked)
	}

	// Every other block cached: the scan's reads from the file skip one
	// block each, and are in order still.
	half, err := NewReader(f, int64(len(data)), ReaderOptions{Cache: NewCache(64 << 20), FileNum: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	it = half.NewIter(nil, nil)
	for i := 0; i < half.index.len(); i += 2 {
		if !it.SeekGE(half.index.separator(i, nil).UserKey) {
			t.Fatalf("SeekGE block %d's separator: %v", i, it.Error())
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	f.asked = nil
	if scan(half.NewIter(nil, nil)); len(f.asked) == 0 {
		t.Fatal("a scan of a table with every other block cached asked for nothing ahead")
	}
}

// TestShortScanReadsLittleAhead: a scan of eight blocks from a seek, the
// length of a short range query, asks for less than one and a half times
// what it reads, since where its blocks are on the disk a scan costs about
// what it reads. It asks for 1.35 times with the first window at 8 KiB;
// a first window of 64 KiB asked for 1.95 times, and one of 32 KiB 2.45.
func TestShortScanReadsLittleAhead(t *testing.T) {
	_, _, f, r := readaheadTable(t)
	f.asked, f.reads = nil, nil
	it := r.NewIter(nil, nil)
	for ok := it.SeekGE([]byte("key010000")); ok && len(f.reads) < 8; {
		ok = it.Next()
	}
	if err := it.Close(); err != nil || len(f.reads) != 8 {
		t.Fatalf("the scan read %d blocks (%v), want 8", len(f.reads), err)
	}
	var asked int64
	for _, a := range f.asked {
		asked += a[1]
	}
	blockLen := int64(r.index.handle(0).length + blockTrailerLen)
	if read := 8 * blockLen; asked == 0 || 2*asked > 3*read {
		t.Fatalf("an 8-block scan (%d bytes) asked for %d bytes ahead (%v), want some and less than 1.5 times what it read", read, asked, f.asked)
	}
}

// readaheadTable builds an uncompressed table of 20,000 entries of 100-byte
// values (about 30 entries a block), keys key000000 to key019999, and opens
// it, with no cache, on a file that records its prefetches and reads. It
// returns the entries, the table's bytes, the file and the Reader, which
// the test's end closes.
func readaheadTable(t *testing.T) ([]kv, []byte, *prefetchingFile, *Reader) {
	t.Helper()
	var all []kv
	for i := range 20000 {
		all = append(all, kv{base.MakeInternalKey(fmt.Appendf(nil, "key%06d", i), 1, base.KindSet), bytes.Repeat([]byte{byte(i)}, 100)})
	}
	data, _ := buildTable(t, all, WriterOptions{Compression: NoCompression})
	f := &prefetchingFile{memFile: newMemFile(data)}
	r, err := NewReader(f, int64(len(data)), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return all, data, f, r
}
