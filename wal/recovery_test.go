package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/internal/base"
)

// TestTornTailTruncation cuts the file at every offset inside its last,
// unsynced record (which spans a block boundary): the reader must return
// the intact prefix and report a torn tail where it ends.
func TestTornTailTruncation(t *testing.T) {
	recs := [][]byte{record(0, 10), record(1, 5000), record(2, 0), record(3, 20000), record(4, 12000)}
	last := len(recs) - 1
	f, ends := writeLog(t, recs, func(i int) bool { return i < last })
	data, _ := f.snapshot()
	start, end := ends[last-1], ends[last]
	if start/BlockSize == (end-1)/BlockSize {
		t.Fatalf("test setup: last record [%d,%d) does not span a block boundary", start, end)
	}
	for cut := start; cut < end; cut++ {
		res := readAll(t, data[:cut])
		if res.err != nil {
			t.Fatalf("cut at %d: %v", cut, res.err)
		}
		checkPrefix(t, res.recs, recs)
		if len(res.recs) != last || res.off != start {
			t.Fatalf("cut at %d: read %d records ending at %d, want %d ending at %d", cut, len(res.recs), res.off, last, start)
		}
		if wantTorn := cut > start; res.torn != wantTorn {
			t.Fatalf("cut at %d: torn = %v, want %v", cut, res.torn, wantTorn)
		}
	}
	res := readAll(t, data)
	if res.err != nil || res.torn || len(res.recs) != len(recs) || res.off != end {
		t.Fatalf("whole file: %d records ending at %d, err=%v torn=%v", len(res.recs), res.off, res.err, res.torn)
	}
}

// TestCorruptionBeforeSyncedData flips each byte of a record that later,
// synced records follow: the reader must return the records before it and
// then a corruption error naming the damaged chunk's offset.
func TestCorruptionBeforeSyncedData(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
	}{
		// The evidence is past the damage in the same block, so finding
		// it cannot rely on the damaged chunk's length.
		{"same block", []int{100, 200, 300, 50, 60, 70}},
		{"spanning", []int{100, 200, 2*BlockSize + 100, 50, 60}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var recs [][]byte
			for i, n := range tc.sizes {
				recs = append(recs, record(i, n))
			}
			const victim = 2
			f, ends := writeLog(t, recs, func(int) bool { return true })
			data, _ := f.snapshot()
			start, end := ends[victim-1], ends[victim]
			for _, off := range flipOffsets(data, start, end) {
				damaged := bytes.Clone(data)
				damaged[off] ^= 0x40
				res := readAll(t, damaged)
				if !errors.Is(res.err, base.ErrCorruption) {
					t.Fatalf("flip at %d: got err=%v torn=%v after %d records, want corruption", off, res.err, res.torn, len(res.recs))
				}
				checkPrefix(t, res.recs, recs)
				if len(res.recs) != victim {
					t.Fatalf("flip at %d: read %d records before the error, want %d", off, len(res.recs), victim)
				}
				chunk := chunkOffset(data, off)
				if want := fmt.Sprintf("chunk at offset %d:", chunk); !strings.Contains(res.err.Error(), want) {
					t.Fatalf("flip at %d: error %q does not name %q", off, res.err, want)
				}
			}
		})
	}
}

// chunkOffset returns the offset of the chunk holding byte off of an
// undamaged log.
func chunkOffset(data []byte, off int64) int64 {
	blockOff := off - off%BlockSize
	p := blockOff
	for {
		next := p + HeaderSize + int64(layout{}.decodeHeader(data[p:]).length)
		if off < next {
			return p
		}
		p = next
	}
}

// flipOffsets returns the offsets in [start, end) worth damaging: every
// header byte, and a sample of payload bytes (all of them would make the
// tests slow without finding more).
func flipOffsets(data []byte, start, end int64) []int64 {
	var offs []int64
	for off := start; off < end; off++ {
		if off-chunkOffset(data, off) < HeaderSize || off%37 == 0 {
			offs = append(offs, off)
		}
	}
	return offs
}

// TestDamagedUnsyncedTail flips each byte of the last record, which was
// never synced: the reader must treat it as a torn tail.
func TestDamagedUnsyncedTail(t *testing.T) {
	recs := [][]byte{record(0, 10), record(1, 5000), record(2, BlockSize+500)}
	last := len(recs) - 1
	f, ends := writeLog(t, recs, func(i int) bool { return i < last })
	data, _ := f.snapshot()
	start := ends[last-1]
	for _, off := range flipOffsets(data, start, ends[last]) {
		damaged := bytes.Clone(data)
		damaged[off] ^= 0x01
		res := readAll(t, damaged)
		if res.err != nil {
			t.Fatalf("flip at %d: %v", off, res.err)
		}
		checkPrefix(t, res.recs, recs)
		if len(res.recs) != last || !res.torn || res.off != start {
			t.Fatalf("flip at %d: %d records, torn=%v at %d; want %d, torn at %d", off, len(res.recs), res.torn, res.off, last, start)
		}
	}
}

// TestZeroFilledTail appends zeros (as a file system may after a crash
// that extended the file but lost its data) and a block of garbage.
func TestZeroFilledTail(t *testing.T) {
	recs := [][]byte{record(0, 10), record(1, 40000)}
	f, ends := writeLog(t, recs, func(int) bool { return true })
	data, _ := f.snapshot()
	for _, tail := range [][]byte{
		make([]byte, 5),
		make([]byte, HeaderSize),
		make([]byte, 3*BlockSize),
		record(99, 2*BlockSize),
	} {
		res := readAll(t, append(bytes.Clone(data), tail...))
		if res.err != nil || !res.torn || len(res.recs) != len(recs) || res.off != ends[len(ends)-1] {
			t.Fatalf("tail of %d bytes: %d records, err=%v, torn=%v at %d", len(tail), len(res.recs), res.err, res.torn, res.off)
		}
	}
}

// TestCrashImages simulates crashes: the file keeps everything synced,
// and of the rest a prefix, with some pages zeroed or garbled. The reader
// must return at least every synced record, never an error, and only
// records that were written.
func TestCrashImages(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 150 {
		var recs [][]byte
		for i := range 1 + rng.IntN(60) {
			recs = append(recs, record(trial*100+i, rng.IntN(BlockSize)))
		}
		syncs := rng.IntN(4)
		f, ends := writeLogWithCrash(t, recs, func() bool { return rng.IntN(4) < syncs })
		data, synced := f.data, f.synced
		cut := synced + rng.IntN(len(data)-synced+1)
		img := bytes.Clone(data[:cut])
		for p := synced - synced%4096; p < cut; p += 4096 {
			if p < synced {
				continue
			}
			switch rng.IntN(4) {
			case 0:
				clear(img[p:min(p+4096, cut)])
			case 1:
				copy(img[p:min(p+4096, cut)], record(trial, 4096))
			}
		}
		res := readAll(t, img)
		if res.err != nil {
			t.Fatalf("trial %d: %v", trial, res.err)
		}
		checkPrefix(t, res.recs, recs)
		wantAtLeast := 0
		for wantAtLeast < len(ends) && ends[wantAtLeast] <= int64(synced) {
			wantAtLeast++
		}
		if len(res.recs) < wantAtLeast {
			t.Fatalf("trial %d: read %d records, %d were synced", trial, len(res.recs), wantAtLeast)
		}
	}
}

// writeLogWithCrash writes recs, syncing after a record when doSync says
// so, and abandons the writer without Close once everything reached the
// file, leaving the tail unsynced as a crash would.
func writeLogWithCrash(t *testing.T, recs [][]byte, doSync func() bool) (*memFile, []int64) {
	t.Helper()
	f := &memFile{}
	w := NewWriter(f, WriterOptions{})
	ends := make([]int64, len(recs))
	for i, p := range recs {
		end, err := w.WriteRecord(p)
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = end
		if doSync() {
			if err := w.SyncTo(end); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Wait for the unsynced bytes to reach the file without syncing them.
	w.mu.Lock()
	for w.flushed < w.logical && w.err == nil {
		w.signalLocked()
		w.cond.Wait()
	}
	w.mu.Unlock()
	data, synced := f.snapshot()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &memFile{data: data, synced: synced}, ends
}

// TestOutOfSequenceChunks hand-builds logs whose chunks are individually
// valid but out of order; with nothing synced past them they are a torn
// tail, and with synced data after them they are corruption.
func TestOutOfSequenceChunks(t *testing.T) {
	chunk := func(typ byte, payload string, sync int64) []byte {
		b := make([]byte, HeaderSize+len(payload))
		copy(b[HeaderSize:], payload)
		layout{}.putChunk(b, len(payload), typ, sync)
		return b
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, tc := range []struct {
		name    string
		data    []byte
		recs    int
		corrupt bool
	}{
		{"middle first", cat(chunk(chunkMiddle, "a", 0)), 0, false},
		{"last first", cat(chunk(chunkFull, "a", 0), chunk(chunkLast, "b", 0)), 1, false},
		{"full inside record", cat(chunk(chunkFirst, "a", 0), chunk(chunkFull, "b", 0)), 0, false},
		{"first inside record", cat(chunk(chunkFirst, "a", 0), chunk(chunkFirst, "b", 0), chunk(chunkLast, "c", 0)), 0, false},
		{"synced after", cat(chunk(chunkFull, "a", 0), chunk(chunkLast, "b", 0), chunk(chunkFull, "c", 30)), 1, true},
		{"sync offset from the future", cat(chunk(chunkFull, "a", 0), chunk(chunkFull, "b", 1000)), 1, false},
		{"bad type", cat(chunk(chunkFull, "a", 0), chunk(9, "b", 0)), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := readAll(t, tc.data)
			if got := errors.Is(res.err, base.ErrCorruption); got != tc.corrupt || (!got && res.err != nil) {
				t.Fatalf("err = %v, want corruption %v", res.err, tc.corrupt)
			}
			if len(res.recs) != tc.recs || (!tc.corrupt && !res.torn) {
				t.Fatalf("%d records, torn=%v; want %d", len(res.recs), res.torn, tc.recs)
			}
		})
	}
}

type failingReaderAt struct{ data []byte }

func (f failingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= BlockSize {
		return 0, errInjected
	}
	return bytes.NewReader(f.data).ReadAt(p, off)
}

func TestReadError(t *testing.T) {
	f, _ := writeLog(t, [][]byte{record(0, 10), record(1, 2*BlockSize)}, nil)
	data, _ := f.snapshot()
	r := NewReader(failingReaderAt{data}, int64(len(data)))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	_, err := r.Next()
	if !errors.Is(err, errInjected) || errors.Is(err, base.ErrCorruption) {
		t.Fatalf("got %v, want the read failure", err)
	}
	// A size larger than the file is a read failure, not a torn tail.
	r = NewReader(bytes.NewReader(data[:100]), 200)
	if _, err = r.Next(); err == nil || err == io.EOF || errors.Is(err, base.ErrCorruption) {
		t.Fatalf("short file: got %v, want a read failure", err)
	}
}

func TestZeroRunEnd(t *testing.T) {
	for _, n := range []int{0, 1, 63, 64, 65, 200, BlockSize} {
		for _, at := range []int{0, 1, 63, 64, 65, 127, 128, 199, BlockSize - 1} {
			for _, from := range []int{0, 1, 70} {
				if from > n {
					continue
				}
				b, want := make([]byte, n), n
				if at < n {
					b[at] = 7
					if at >= from {
						want = at
					}
				}
				if got := zeroRunEnd(b, from); got != want {
					t.Fatalf("%d bytes, nonzero at %d, from %d: %d, want %d", n, at, from, got, want)
				}
			}
		}
	}
}
