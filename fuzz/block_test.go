package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/sstable"
)

// FuzzBlock feeds arbitrary block contents to the block decoders, as if
// they had passed their checksum: the iterator, the point lookup and the
// index, properties and filter parsers (through sstable.DecodeRawBlock).
// They must report corruption, never panic or loop, and forward and
// reverse iteration must agree. (FuzzSSTableReader covers whole files,
// where checksums stop most mutations before they reach these decoders.)
func FuzzBlock(f *testing.F) {
	for _, b := range blockSeeds(f) {
		f.Add(b, []byte("pk1|rk005"))
	}
	f.Add([]byte{0, 0, 0, 0}, []byte{})
	f.Add([]byte{1}, []byte("a"))
	f.Fuzz(func(t *testing.T, data, search []byte) {
		// Every entry takes at least 3 bytes (three uvarint lengths).
		maxEntries := len(data)/3 + 1
		d := sstable.DecodeRawBlock(data, search, maxEntries)
		for what, err := range map[string]error{
			"init": d.InitErr, "forward scan": d.ForwardErr, "reverse scan": d.BackwardErr, "seek": d.SeekErr,
			"point lookup": d.GetErr, "index": d.IndexErr, "properties": d.PropertiesErr, "filter": d.FilterErr,
		} {
			if err != nil && !errors.Is(err, base.ErrCorruption) {
				t.Fatalf("%s: error %v is not corruption", what, err)
			}
		}
		if len(d.Forward) > maxEntries || len(d.Backward) > maxEntries {
			t.Fatalf("%d entries forward, %d backward in %d bytes", len(d.Forward), len(d.Backward), len(data))
		}
		if d.ForwardErr == nil && d.BackwardErr == nil {
			if len(d.Forward) != len(d.Backward) {
				t.Fatalf("%d entries forward, %d backward", len(d.Forward), len(d.Backward))
			}
			for i, k := range d.Forward {
				if !bytes.Equal(k, d.Backward[len(d.Backward)-1-i]) {
					t.Fatalf("entry %d differs forward and backward", i)
				}
			}
		}
	})
}

// blockSeeds returns the stored blocks of the uncompressed seed tables:
// data blocks with several restart intervals, index, properties and
// filter blocks, found through the footer (docs/sstable.md).
func blockSeeds(tb testing.TB) [][]byte {
	tables := sstableSeeds(tb)
	var blocks [][]byte
	for _, name := range []string{"none", "tiny-blocks"} {
		data := tables[name]
		ft := data[len(data)-sstFooterLen:]
		block := func(off, n uint64) []byte {
			if n == 0 || off+n+sstBlockTrailerLen > uint64(len(data)) || data[off+n] != 0 {
				return nil // absent, or compressed
			}
			return data[off : off+n]
		}
		for i := range 3 {
			if b := block(binary.LittleEndian.Uint64(ft[16*i:]), binary.LittleEndian.Uint64(ft[16*i+8:])); b != nil {
				blocks = append(blocks, b)
			}
		}
		index := blocks[len(blocks)-3]
		for _, v := range sstBlockValues(index) {
			off, k := binary.Uvarint(v)
			n, m := binary.Uvarint(v[k:])
			if k <= 0 || m <= 0 {
				tb.Fatalf("%s: bad index value %x", name, v)
			}
			if b := block(off, n); b != nil {
				blocks = append(blocks, b)
			}
		}
	}
	return blocks
}

// TestBlockSeeds checks that FuzzBlock starts from blocks the decoders
// accept: every seed but the filters scans cleanly, and the seeds include
// an index, a properties and a filter block.
func TestBlockSeeds(t *testing.T) {
	var index, props, filter int
	seeds := blockSeeds(t)
	for i, b := range seeds {
		d := sstable.DecodeRawBlock(b, nil, len(b))
		// A filter block has a format of its own; every other seed is a
		// block of entries.
		if d.FilterErr != nil && (d.InitErr != nil || d.ForwardErr != nil || d.BackwardErr != nil || len(d.Forward) == 0) {
			t.Errorf("seed %d: %d entries, errors %v %v %v", i, len(d.Forward), d.InitErr, d.ForwardErr, d.BackwardErr)
		}
		if d.IndexErr == nil {
			index++
		}
		if d.PropertiesErr == nil {
			props++
		}
		if d.FilterErr == nil {
			filter++
		}
	}
	if index == 0 || props == 0 || filter == 0 || len(seeds) < 8 {
		t.Fatalf("%d seeds: %d index, %d properties, %d filter blocks", len(seeds), index, props, filter)
	}
}
