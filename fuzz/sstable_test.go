package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/sstable"
)

// FuzzSSTableReader opens arbitrary bytes as a table. NewReader may refuse
// them, with an error; a table it opens must iterate fully forwards and
// backwards (the same entries, reversed, unless it meets corruption), and
// answer Gets and bounded scans, without panicking or looping. Every error
// must wrap base.ErrCorruption, except an unsupported format version.
//
// Checksums stop nearly every mutation at the first block it touches, so
// each input is also tried with the footer's and meta blocks' checksums
// recomputed (see sstFixChecksums): then mutations reach the footer, index,
// properties and filter decoders. FuzzBlock covers the block
// decoders directly.
func FuzzSSTableReader(f *testing.F) {
	for _, seed := range sstableSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sstCheckTable(t, data)
		sstCheckTable(t, sstFixChecksums(data))
	})
}

// sstMemFile is an sstable.ReadableFile over a byte slice.
type sstMemFile struct{ *bytes.Reader }

func (sstMemFile) Close() error { return nil }

// sstMaxScan bounds the entries a scan may return: every entry takes at
// least 3 bytes of a block; uncompressed blocks lie in the file, and
// compressed ones decompress to at most MaxBlockSize bytes each.
func sstMaxScan(r *sstable.Reader, size int) int {
	p := r.Properties()
	return int(p.NumDataBlocks*(p.MaxBlockSize/3+1)) + size/3 + 1
}

func sstCheckErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, base.ErrCorruption) {
		t.Fatalf("%s: error %v does not wrap ErrCorruption", what, err)
	}
}

func sstCheckTable(t *testing.T, data []byte) {
	r, err := sstable.NewReader(sstMemFile{bytes.NewReader(data)}, int64(len(data)),
		sstable.ReaderOptions{Cache: sstable.NewCache(1 << 20), FileNum: 7})
	if err != nil {
		if !errors.Is(err, base.ErrCorruption) && !bytes.Contains([]byte(err.Error()), []byte("unsupported format version")) {
			t.Fatalf("NewReader: %v", err)
		}
		return
	}
	defer r.Close()
	limit := sstMaxScan(r, len(data))

	var fwd []base.InternalKey
	it := r.NewIter(nil, nil)
	for ok := it.First(); ok; ok = it.Next() {
		fwd = append(fwd, it.Key().Clone())
		_ = it.Value()
		if len(fwd) > limit {
			t.Fatalf("more than %d entries", limit)
		}
	}
	fwdErr := it.Close()
	sstCheckErr(t, "forward scan", fwdErr)

	var rev []base.InternalKey
	it = r.NewIter(nil, nil)
	for ok := it.Last(); ok; ok = it.Prev() {
		rev = append(rev, it.Key().Clone())
		if len(rev) > limit {
			t.Fatalf("more than %d entries backwards", limit)
		}
	}
	revErr := it.Close()
	sstCheckErr(t, "reverse scan", revErr)
	if fwdErr == nil && revErr == nil {
		if len(fwd) != len(rev) {
			t.Fatalf("%d entries forward, %d backward", len(fwd), len(rev))
		}
		for i := range fwd {
			if j := len(rev) - 1 - i; !bytes.Equal(fwd[i].UserKey, rev[j].UserKey) || fwd[i].Trailer != rev[j].Trailer {
				t.Fatalf("entry %d: %s forward, %s backward", i, fwd[i], rev[j])
			}
		}
	}

	probes := [][]byte{nil, []byte("a"), []byte("\xff\xff")}
	for i := 0; i < len(fwd) && i < 8; i++ {
		probes = append(probes, fwd[i*len(fwd)/8].UserKey)
	}
	for _, k := range probes {
		v, _, err := r.Get(k, base.SeqNumMax)
		v.Release()
		sstCheckErr(t, "Get", err)
		v, _, err = r.Get(k, 1)
		v.Release()
		sstCheckErr(t, "Get", err)
		r.MayContain(k)
		r.MayContainPrefix(k)
	}
	// Bounded scans in both directions.
	for i := 0; i+1 < len(probes); i++ {
		it := r.NewIter(probes[i], probes[i+1])
		n := 0
		for ok := it.SeekGE(probes[i+1]); ok && n < limit; ok = it.Prev() {
			n++
		}
		for ok := it.SeekLT(probes[i]); ok && n < 2*limit; ok = it.Next() {
			n++
		}
		sstCheckErr(t, "bounded scan", it.Close())
	}
}

// The footer layout of docs/sstable.md, and the block trailer size.
const (
	sstFooterLen       = 68
	sstFooterSumOff    = 52
	sstBlockTrailerLen = 9
)

// sstFixChecksums returns a copy of data in which the footer checksum and
// the trailer checksums of the blocks the footer points to (index, filter,
// properties) are recomputed, and, when the index block is stored
// uncompressed, those of the data blocks it points to; so that a mutation
// inside them is not rejected by its checksum.
func sstFixChecksums(data []byte) []byte {
	if len(data) < sstFooterLen {
		return data
	}
	data = bytes.Clone(data)
	ft := data[len(data)-sstFooterLen:]
	limit := uint64(len(data) - sstFooterLen)
	// fix recomputes the checksum of the block at off and returns its
	// stored bytes and type, or nil if it lies outside the file.
	fix := func(off, n uint64) ([]byte, byte) {
		if n == 0 || off > limit || n > limit || n+sstBlockTrailerLen > limit-off {
			// Absent (a filter of length 0) or outside the file.
			return nil, 0
		}
		block := data[off : off+n+1] // stored bytes and type
		binary.LittleEndian.PutUint64(data[off+n+1:], xxhash.Sum64(block))
		return block[:n], block[n]
	}
	// Data blocks first: fixing them changes no meta block.
	if index, typ := fix(binary.LittleEndian.Uint64(ft[0:]), binary.LittleEndian.Uint64(ft[8:])); typ == 0 {
		for _, v := range sstBlockValues(index) {
			off, k := binary.Uvarint(v)
			if k <= 0 {
				continue
			}
			if n, m := binary.Uvarint(v[k:]); m > 0 {
				fix(off, n)
			}
		}
	}
	for i := range 3 {
		fix(binary.LittleEndian.Uint64(ft[16*i:]), binary.LittleEndian.Uint64(ft[16*i+8:]))
	}
	binary.LittleEndian.PutUint64(ft[sstFooterSumOff:], xxhash.Sum64(ft[:sstFooterSumOff]))
	return data
}

// sstBlockValues returns the values of a block's entries, as far as they
// decode (see docs/sstable.md: entries, then the restart array).
func sstBlockValues(b []byte) [][]byte {
	if len(b) < 4 {
		return nil
	}
	n := uint64(binary.LittleEndian.Uint32(b[len(b)-4:]))
	if n > uint64(len(b)-4)/4 {
		return nil
	}
	entries := b[:len(b)-4-4*int(n)]
	var vals [][]byte
	for len(entries) > 0 {
		var lens [3]uint64
		for i := range lens {
			v, k := binary.Uvarint(entries)
			if k <= 0 {
				return vals
			}
			lens[i], entries = v, entries[k:]
		}
		if lens[1] > uint64(len(entries)) || lens[2] > uint64(len(entries))-lens[1] {
			return vals
		}
		entries = entries[lens[1]:]
		vals = append(vals, entries[:lens[2]])
		entries = entries[lens[2]:]
	}
	return vals
}

// sstableSeeds builds small real tables: each compression, with and
// without filters, an empty one, and one with tiny blocks.
func sstableSeeds(t testing.TB) map[string][]byte {
	build := func(opts sstable.WriterOptions, n int) []byte {
		var buf bytes.Buffer
		w := sstable.NewWriter(&buf, opts)
		for i := range n {
			k := fmt.Appendf(nil, "pk%d|rk%03d", i/4, i)
			kind := base.KindSet
			if i%7 == 3 {
				kind = base.KindDelete
			}
			for v := range 1 + i%2 {
				key := base.MakeInternalKey(k, base.SeqNum(100-v), kind)
				if err := w.Add(key, bytes.Repeat([]byte{byte('a' + i%3)}, 10+i%20)); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	split := func(k []byte) int {
		if i := bytes.IndexByte(k, '|'); i >= 0 {
			return i + 1
		}
		return len(k)
	}
	return map[string][]byte{
		"empty":       build(sstable.WriterOptions{}, 0),
		"none":        build(sstable.WriterOptions{Compression: sstable.NoCompression, BlockSize: 256}, 20),
		"s2":          build(sstable.WriterOptions{Compression: sstable.S2Compression, BlockSize: 256, Split: split}, 20),
		"zstd":        build(sstable.WriterOptions{Compression: sstable.ZstdCompression, BlockSize: 256}, 20),
		"no-filter":   build(sstable.WriterOptions{BloomBitsPerKey: -1}, 5),
		"tiny-blocks": build(sstable.WriterOptions{Compression: sstable.NoCompression, BlockSize: 64, RestartInterval: 2}, 12),
	}
}

// TestSSTableSeeds checks that the seed tables open and scan cleanly.
func TestSSTableSeeds(t *testing.T) {
	for name, data := range sstableSeeds(t) {
		r, err := sstable.NewReader(sstMemFile{bytes.NewReader(data)}, int64(len(data)), sstable.ReaderOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		it := r.NewIter(nil, nil)
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil || uint64(n) != r.Properties().NumEntries {
			t.Fatalf("%s: %d entries, err %v", name, n, err)
		}
		r.Close()
		if !bytes.Equal(sstFixChecksums(data), data) {
			t.Fatalf("%s: sstFixChecksums changed a valid table", name)
		}
	}
}

// TestSSTableSeedFiles checks the committed corpus of FuzzSSTableReader.
func TestSSTableSeedFiles(t *testing.T) {
	checkSeedFiles(t, "FuzzSSTableReader", sstableSeeds(t))
}
