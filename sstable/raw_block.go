package sstable

import (
	"bytes"
	"fmt"

	"github.com/tabuladb/tabula/internal/base"
)

// RawBlockDecoding is what the single-block decoders make of one block's
// bytes; see DecodeRawBlock.
type RawBlockDecoding struct {
	// InitErr is the block iterator's refusal of the block; when it is
	// set, the iterator fields below are empty.
	InitErr error
	// Forward and Backward are the encoded keys a full scan met in each
	// direction, in the order met; each stops one past the caller's bound.
	Forward, Backward       [][]byte
	ForwardErr, BackwardErr error
	// SeekErr is the iterator's error after seeking to the search key both
	// ways and stepping a few entries from there.
	SeekErr error
	// The errors of a point lookup of the search key, and of parsing the
	// bytes as an index, properties and filter block.
	GetErr, IndexErr, PropertiesErr, FilterErr error
}

// DecodeRawBlock runs every decoder of single blocks on data as if it had
// passed its checksum: the block iterator (scans both ways, seeks), the
// point lookup of search, and the index, properties and filter parsers,
// and reports what each made of it. maxEntries bounds each scan. It exists
// for the fuzz tests in package fuzz, where whole-table inputs seldom get
// past the checksums to these decoders; the engine does not use it.
func DecodeRawBlock(data, search []byte, maxEntries int) RawBlockDecoding {
	var d RawBlockDecoding
	var it blockIter
	if d.InitErr = it.init(data); d.InitErr == nil {
		for ok := it.first(); ok && len(d.Forward) <= maxEntries; ok = it.next() {
			d.Forward = append(d.Forward, bytes.Clone(it.key))
		}
		d.ForwardErr = it.err
		var rev blockIter
		if err := rev.init(data); err != nil {
			// Not corruption: the same bytes were accepted just above.
			d.BackwardErr = fmt.Errorf("sstable: block accepted, then refused by a second iterator: %v", err)
		} else {
			for ok := rev.last(); ok && len(d.Backward) <= maxEntries; ok = rev.prev() {
				d.Backward = append(d.Backward, bytes.Clone(rev.key))
			}
			d.BackwardErr = rev.err
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
		d.SeekErr = it.err
	}
	_, _, _, d.GetErr = getInBlock(data, base.MakeSearchKey(search, 5))
	var x index
	if x, d.IndexErr = decodeIndex(data, 1<<40); d.IndexErr == nil {
		x.free()
	}
	_, d.PropertiesErr = decodeProperties(data)
	var f *bloomFilter
	if f, d.FilterErr = decodeFilter(data); d.FilterErr == nil {
		f.mayContain(keyHash(search))
		f.free()
	}
	return d
}
