package fuzz

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// FuzzWALSegments feeds recovery two WAL segments of arbitrary records
// (valid record framing around arbitrary batch bytes), the older one cut
// at an arbitrary offset, as a crash during a rotation may leave them
// (docs/wal.md, "Segments"). cut%3 picks how they are written: in version
// 1 chunks (an engine before recycling), in recyclable chunks, or in
// recyclable chunks with the older segment's file a reused one, whose
// older log (the newer records, misaligned) lies past what was written.
// Open must either recover or refuse with a corruption error, never
// panic; Verify must refuse what Open refuses (it may refuse more:
// batches out of sequence order, which Open replays); and a DB that
// opened must take a write and open again.
func FuzzWALSegments(f *testing.F) {
	batch := func(seq uint64, keys ...string) []byte {
		b := binary.LittleEndian.AppendUint64(nil, seq)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
		for _, k := range keys {
			b = append(b, 1) // a set
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			b = binary.AppendUvarint(b, 1)
			b = append(b, 'v')
		}
		return b
	}
	join := func(recs ...[]byte) []byte {
		var out []byte
		for _, r := range recs {
			out = binary.AppendUvarint(out, uint64(len(r)))
			out = append(out, r...)
		}
		return out
	}
	older := join(batch(1), batch(1, "a"), batch(2, "b", "c"))
	f.Add(older, join(batch(4), batch(4, "d")), uint16(0xffff))
	f.Add(older, join(batch(4), batch(4, "d")), uint16(30))
	f.Add(older, join(batch(9), batch(9, "d")), uint16(0xffff))
	f.Add(older, join(batch(1, "x")), uint16(0xffff))
	f.Add([]byte{}, join(batch(1, "a")), uint16(0))
	// Recyclable chunks (cut%3 == 1), and over a reused file (2).
	f.Add(older, join(batch(4), batch(4, "d")), uint16(0xfffd))
	f.Add(older, join(batch(4), batch(4, "d"), batch(5, "e", "f", "g")), uint16(0xfffe))
	f.Add(older, join(batch(4), batch(4, "d")), uint16(31))
	f.Add(older, join(batch(4), batch(4, "d")), uint16(62))
	f.Fuzz(func(t *testing.T, olderRecs, newerRecs []byte, cut uint16) {
		fs := vfs.NewMem()
		db, err := lsm.Open("/db", &lsm.Options{FS: fs, MemTableSize: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		// The DB's own (empty) segment gives way to the two written here.
		names, err := fs.List("/db")
		if err != nil {
			t.Fatal(err)
		}
		var logs []uint64
		for _, n := range names {
			var num uint64
			if _, err := fmt.Sscanf(n, "%06d.log", &num); err == nil {
				logs = append(logs, num)
			}
		}
		if len(logs) == 0 {
			t.Fatal("no WAL segment after Open")
		}
		num := slices.Max(logs)
		name := func(n uint64) string { return fmt.Sprintf("/db/%06d.log", n) }
		var olderNum, newerNum uint64 // version 1 chunks
		var under []byte
		if cut%3 > 0 {
			olderNum, newerNum = num, num+1
		}
		if cut%3 == 2 {
			under = encodeSegment(t, append([][]byte{nil}, splitRecords(newerRecs)...), num-1)
		}
		writeFile(t, fs, name(num), overwrite(under, cutTo(encodeSegment(t, splitRecords(olderRecs), olderNum), int(cut))))
		writeFile(t, fs, name(num+1), encodeSegment(t, splitRecords(newerRecs), newerNum))

		_, verr := lsm.Verify("/db", fs)
		db, err = lsm.Open("/db", &lsm.Options{FS: fs, MemTableSize: 256 << 10})
		if err != nil {
			if !errors.Is(err, lsm.ErrCorruption) {
				t.Fatalf("Open: %v, want a corruption error or none", err)
			}
			if verr == nil {
				t.Fatalf("Open refused the segments (%v), Verify did not", err)
			}
			return
		}
		if verr != nil && !errors.Is(verr, lsm.ErrCorruption) {
			t.Fatalf("Verify: %v, want a corruption error or none", verr)
		}
		if err := db.Set([]byte("after"), []byte("recovery"), nil); err != nil {
			t.Fatalf("a write after recovery: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db, err = lsm.Open("/db", &lsm.Options{FS: fs, MemTableSize: 256 << 10})
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		if v, err := db.Get([]byte("after")); err != nil || string(v) != "recovery" {
			t.Fatalf("the write after recovery: %q, %v", v, err)
		}
		db.Close()
	})
}

// splitRecords cuts data into records, each a uvarint length and that
// many bytes (the last one whatever is left).
func splitRecords(data []byte) [][]byte {
	var recs [][]byte
	for len(data) > 0 && len(recs) < 64 {
		n, k := binary.Uvarint(data)
		if k <= 0 {
			return append(recs, data)
		}
		data = data[k:]
		n = min(n, uint64(len(data)))
		recs = append(recs, data[:n])
		data = data[n:]
	}
	return recs
}

// encodeSegment returns recs written as log num: in recyclable chunks
// carrying num, or in version 1 chunks when num is 0.
func encodeSegment(t *testing.T, recs [][]byte, num uint64) []byte {
	t.Helper()
	var buf walBuffer
	w := wal.NewWriter(&buf, wal.WriterOptions{LogNum: num})
	for _, r := range recs {
		if _, err := w.WriteRecord(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// cutTo returns data cut to its first cut bytes when cut is below its
// size.
func cutTo(data []byte, cut int) []byte {
	return data[:min(cut, len(data))]
}

// overwrite returns data written over under from its start, as into a
// reused file.
func overwrite(under, data []byte) []byte {
	out := slices.Clone(under)
	n := copy(out, data)
	return append(out, data[n:]...)
}
