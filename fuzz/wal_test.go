package fuzz

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/wal"
)

// FuzzWALReader feeds arbitrary bytes to the record log reader. It must
// end every input with io.EOF or a corruption error, without panicking,
// looping or returning more record bytes than the input holds; and the
// records it does return must survive a round trip through a Writer.
func FuzzWALReader(f *testing.F) {
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Random mutations almost never leave a valid checksum, which
		// would confine the fuzzer to the reader's first check; reading
		// a copy with its checksums repaired reaches the rest.
		readWAL(t, data)
		data = walFixChecksums(data)
		recs, _ := readWAL(t, data)
		// Whatever was read rewrites to a log that reads back the same.
		var buf walBuffer
		w := wal.NewWriter(&buf, wal.WriterOptions{})
		for _, rec := range recs {
			if _, err := w.WriteRecord(rec); err != nil {
				t.Fatalf("rewrite: %v", err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatalf("rewrite: %v", err)
		}
		again, againTorn := readWAL(t, buf.Bytes())
		if againTorn || len(again) != len(recs) {
			t.Fatalf("rewritten log: %d records (torn %v), want %d", len(again), againTorn, len(recs))
		}
		for i := range recs {
			if !bytes.Equal(again[i], recs[i]) {
				t.Fatalf("rewritten log: record %d differs", i)
			}
		}
	})
}

// readWAL reads every record of data and checks the reader's invariants.
func readWAL(t *testing.T, data []byte) (recs [][]byte, torn bool) {
	t.Helper()
	r := wal.NewReader(bytes.NewReader(data), int64(len(data)))
	total := 0
	for {
		rec, err := r.Next()
		if err != nil {
			if err != io.EOF && !errors.Is(err, base.ErrCorruption) {
				t.Fatalf("Next: %v (neither io.EOF nor corruption)", err)
			}
			torn, off := r.TornTail()
			if off < 0 || off > int64(len(data)) {
				t.Fatalf("intact prefix ends at %d, input has %d bytes", off, len(data))
			}
			if torn && err != io.EOF {
				t.Fatalf("torn tail reported with error %v", err)
			}
			if _, again := r.Next(); again != err {
				t.Fatalf("Next after %v returned %v", err, again)
			}
			return recs, torn
		}
		total += len(rec)
		recs = append(recs, bytes.Clone(rec))
		if total > len(data) || len(recs) > len(data)/wal.HeaderSize+1 {
			t.Fatalf("%d records of %d bytes from a %d-byte input", len(recs), total, len(data))
		}
	}
}

// walFixChecksums returns a copy of data in which every chunk the reader
// could reach along a block's chain of lengths has a correct checksum.
func walFixChecksums(data []byte) []byte {
	data = bytes.Clone(data)
	for blockOff := 0; blockOff < len(data); blockOff += wal.BlockSize {
		block := data[blockOff:min(blockOff+wal.BlockSize, len(data))]
		for pos := 0; pos+wal.HeaderSize <= len(block); {
			end := pos + wal.HeaderSize + int(binary.LittleEndian.Uint16(block[pos+8:]))
			if end > len(block) {
				break
			}
			binary.LittleEndian.PutUint64(block[pos:], xxhash.Sum64(block[pos+8:end]))
			pos = end
		}
	}
	return data
}

// walBuffer is an in-memory wal.SyncFile.
type walBuffer struct{ bytes.Buffer }

func (*walBuffer) Sync() error { return nil }

// walSeed is a real log for the seed corpus, with what reading it gives.
type walSeed struct {
	data    []byte
	recs    int
	torn    bool
	corrupt bool
}

// walSeeds writes real logs: clean, torn and damaged.
func walSeeds(t *testing.T) map[string]walSeed {
	text := func(n int) []byte {
		return bytes.Repeat([]byte("tabula!"), n/7+1)[:n]
	}
	// write returns a log of recs, with an fsync after each record whose
	// index is in synced.
	write := func(recs [][]byte, synced ...int) []byte {
		var buf walBuffer
		w := wal.NewWriter(&buf, wal.WriterOptions{})
		for i, rec := range recs {
			end, err := w.WriteRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(synced, i) {
				if err := w.SyncTo(end); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(buf.Bytes())
	}
	small := [][]byte{[]byte("a"), {}, []byte("batch"), text(300)}
	smallLog := write(small, 0, 1, 2, 3)
	spanning := write([][]byte{text(100), text(wal.BlockSize + 500), text(40)}, 0, 1)
	// The first record leaves a 5-byte trailer in the first block.
	trailer := write([][]byte{text(wal.BlockSize - wal.HeaderSize - 5), []byte("next")}, 0)
	flipped := bytes.Clone(smallLog)
	flipped[2*wal.HeaderSize+1+3] ^= 1 // the third record's chunk; a synced record follows
	lastDamaged := bytes.Clone(smallLog)
	lastDamaged[len(lastDamaged)-1] ^= 0xff // nothing vouches for the last record
	return map[string]walSeed{
		"empty":          {data: []byte{}},
		"small":          {data: smallLog, recs: 4},
		"spanning":       {data: spanning, recs: 3},
		"spanning-torn":  {data: spanning[:wal.BlockSize+100], recs: 1, torn: true},
		"trailer":        {data: trailer, recs: 2},
		"corrupt-synced": {data: flipped, recs: 2, corrupt: true},
		"torn-unsynced":  {data: write(small, 0)[:len(smallLog)-10], recs: 3, torn: true},
		"zero-tail":      {data: append(bytes.Clone(smallLog), make([]byte, 64)...), recs: 4, torn: true},
		"damaged-last":   {data: lastDamaged, recs: 3, torn: true},
	}
}

// TestWALSeeds checks that the seed logs exercise what their names say.
func TestWALSeeds(t *testing.T) {
	for name, seed := range walSeeds(t) {
		r := wal.NewReader(bytes.NewReader(seed.data), int64(len(seed.data)))
		n := 0
		var err error
		for err == nil {
			if _, err = r.Next(); err == nil {
				n++
			}
		}
		torn, _ := r.TornTail()
		if n != seed.recs || torn != seed.torn || errors.Is(err, base.ErrCorruption) != seed.corrupt {
			t.Errorf("%s: %d records, torn %v, err %v; want %d, torn %v, corrupt %v", name, n, torn, err, seed.recs, seed.torn, seed.corrupt)
		}
	}
}

// TestWALSeedFiles checks the committed corpus of FuzzWALReader.
func TestWALSeedFiles(t *testing.T) {
	seeds := map[string][]byte{}
	for name, seed := range walSeeds(t) {
		seeds[name] = seed.data
	}
	checkSeedFiles(t, "FuzzWALReader", seeds)
}

// FuzzWALReusedFile writes a log of arbitrary records in recyclable
// chunks over arbitrary bytes, as over the older log of a reused file,
// and cuts what it wrote at an arbitrary offset, as a crash leaves a
// write half done: reading the file as the new log must give exactly a
// prefix of its records (all of them when nothing was cut), never an
// error, whatever the older bytes hold, chunks forged with the new log's
// number included (its writer's salt is drawn at random). The older bytes
// alone, read as a log, must end in io.EOF or a corruption error.
func FuzzWALReusedFile(f *testing.F) {
	var older walBuffer
	w := wal.NewWriter(&older, wal.WriterOptions{LogNum: 7})
	for i := range 40 {
		w.WriteRecord(bytes.Repeat([]byte{byte(i)}, 50*i))
	}
	w.Close()
	recs := binary.AppendUvarint(nil, 3)
	recs = append(recs, "abc"...)
	recs = binary.AppendUvarint(recs, 2000)
	recs = append(recs, bytes.Repeat([]byte("x"), 2000)...)
	f.Add(older.Bytes(), recs, uint16(0xffff))
	f.Add(older.Bytes(), recs, uint16(30))
	f.Add([]byte{}, recs, uint16(0xffff))
	f.Fuzz(func(t *testing.T, under, recsData []byte, cut uint16) {
		const num = 0x5eed5eed
		readLogOf(t, under, 7)
		if len(under) >= 23 && binary.LittleEndian.Uint32(under[19:]) == num {
			// The older log's first chunk is its own, of another number
			// (the engine writes a segment's header first): the one place
			// the new log learns its salt from.
			under = bytes.Clone(under)
			under[19] ^= 1
		}
		recs := splitRecords(recsData)
		written := encodeSegment(t, recs, num)
		whole := overwrite(under, written)
		if got, err := readLogOf(t, whole, num); err != nil || len(got) != len(recs) {
			t.Fatalf("the whole log over older bytes: %d of %d records, %v", len(got), len(recs), err)
		}
		got, err := readLogOf(t, overwrite(under, cutTo(written, int(cut))), num)
		if err != nil || len(got) > len(recs) {
			t.Fatalf("the log cut at %d over older bytes: %d records, %v", cut, len(got), err)
		}
		for i := range got {
			if !bytes.Equal(got[i], recs[i]) {
				t.Fatalf("the log cut at %d over older bytes: record %d differs", cut, i)
			}
		}
	})
}

// readLogOf reads data as recyclable log num; it returns the records and
// the error that ended them (nil for io.EOF), which must be a corruption
// error otherwise.
func readLogOf(t *testing.T, data []byte, num uint64) ([][]byte, error) {
	t.Helper()
	r := wal.NewRecyclableReader(bytes.NewReader(data), int64(len(data)), num)
	var recs [][]byte
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return recs, nil
		}
		if err != nil {
			if !errors.Is(err, base.ErrCorruption) {
				t.Fatalf("Next: %v (neither io.EOF nor corruption)", err)
			}
			return recs, err
		}
		recs = append(recs, bytes.Clone(rec))
		if len(recs) > len(data)/wal.RecyclableHeaderSize+1 {
			t.Fatalf("%d records from a %d-byte input", len(recs), len(data))
		}
	}
}
