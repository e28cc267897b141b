package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
)

// memFile is an in-memory SyncFile that remembers how much of it was
// durable at the last Sync and can be told to fail.
type memFile struct {
	mu     sync.Mutex
	data   []byte
	synced int
	syncs  int
	// failWriteAfter makes writes fail once the file would grow past it
	// (when positive).
	failWriteAfter int
	writeErr       error
	syncErr        error
	// gate, when set, makes Write wait until it can receive from it.
	gate chan struct{}
}

func (f *memFile) Write(p []byte) (int, error) {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writeErr != nil && f.failWriteAfter > 0 && len(f.data)+len(p) > f.failWriteAfter {
		n := f.failWriteAfter - len(f.data)
		f.data = append(f.data, p[:n]...)
		return n, f.writeErr
	}
	f.data = append(f.data, p...)
	return len(p), nil
}

func (f *memFile) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.syncErr != nil {
		return f.syncErr
	}
	f.synced = len(f.data)
	f.syncs++
	return nil
}

// snapshot returns a copy of the file's bytes and its durable length.
func (f *memFile) snapshot() ([]byte, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Clone(f.data), f.synced
}

func (f *memFile) syncedLen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.synced
}

func (f *memFile) syncCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

func (f *memFile) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.data)
}

var errInjected = errors.New("injected failure")

// record returns a deterministic payload of n bytes for record i.
func record(i, n int) []byte {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(i))
	binary.LittleEndian.PutUint64(seed[8:], uint64(n))
	p := make([]byte, n)
	_, _ = rand.NewChaCha8(seed).Read(p)
	return p
}

// writeLog writes recs to a fresh memFile, calling SyncTo after each
// record whose index is in syncAfter, closes the writer, and returns the
// file and each record's end offset.
func writeLog(t testing.TB, recs [][]byte, syncAfter func(i int) bool) (*memFile, []int64) {
	t.Helper()
	f := &memFile{}
	w := NewWriter(f, WriterOptions{})
	ends := writeRecords(t, w, recs, syncAfter)
	if got := f.len(); int64(got) != w.Size() {
		t.Fatalf("file holds %d bytes, writer's size is %d", got, w.Size())
	}
	return f, ends
}

// writeRecords appends recs through w, calling SyncTo after each record
// whose index is in syncAfter, closes w, and returns each record's end
// offset.
func writeRecords(t testing.TB, w *Writer, recs [][]byte, syncAfter func(i int) bool) []int64 {
	t.Helper()
	ends := make([]int64, len(recs))
	for i, p := range recs {
		end, err := w.WriteRecord(p)
		if err != nil {
			t.Fatalf("WriteRecord(%d): %v", i, err)
		}
		ends[i] = end
		if syncAfter != nil && syncAfter(i) {
			if err := w.SyncTo(end); err != nil {
				t.Fatalf("SyncTo(%d): %v", end, err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return ends
}

// readResult is what reading a whole log produced.
type readResult struct {
	recs [][]byte
	// err ended the log; nil for io.EOF.
	err  error
	torn bool
	// off is TornTail's offset.
	off int64
}

// readAll reads every record of data.
func readAll(t testing.TB, data []byte) readResult {
	t.Helper()
	return readRecords(t, NewReader(bytes.NewReader(data), int64(len(data))), len(data))
}

// readRecords reads every record through r, a reader of a size-byte log.
func readRecords(t testing.TB, r *Reader, size int) readResult {
	t.Helper()
	var res readResult
	for {
		rec, err := r.Next()
		if err != nil {
			if err != io.EOF {
				res.err = err
			}
			res.torn, res.off = r.TornTail()
			if again, err2 := r.Next(); again != nil || err2 != err {
				t.Fatalf("Next after %v returned %d bytes, %v", err, len(again), err2)
			}
			return res
		}
		res.recs = append(res.recs, bytes.Clone(rec))
		if len(res.recs) > size/HeaderSize+1 {
			t.Fatalf("read %d records from %d bytes", len(res.recs), size)
		}
	}
}

// checkPrefix fails unless got is the first len(got) records of want.
func checkPrefix(t testing.TB, got, want [][]byte) {
	t.Helper()
	if len(got) > len(want) {
		t.Fatalf("read %d records, only %d were written", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d: got %d bytes, want %d bytes (contents differ)", i, len(got[i]), len(want[i]))
		}
	}
}
