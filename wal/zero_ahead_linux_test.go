//go:build linux && (amd64 || arm64)

package wal

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tabuladb/tabula/vfs"
)

// residentPages reports which pages of the file name the page cache holds
// (mincore(2) over a mapping of it).
func residentPages(t *testing.T, name string) []bool {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	vec := make([]byte, (len(m)+pageSize-1)/pageSize)
	if _, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	out := make([]bool, len(vec))
	for i, v := range vec {
		out[i] = v&1 != 0
	}
	return out
}

// TestZerosSkipTheCache checks that the zeros a synced log keeps ahead
// of its end are written past the page cache, so that no fsync of the log
// writes them, where the filesystem has direct I/O; through the cache
// (and so by the log's fsyncs) where it has none, or the Writer is told
// to (cachedZeros). The log's own pages are cached either way.
func TestZerosSkipTheCache(t *testing.T) {
	const ahead = 256 << 10
	dir := t.TempDir()
	probe, err := os.Create(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	direct, directHere := vfs.OpenDirect(probe)
	if directHere {
		direct.Close()
	}
	probe.Close()
	recs := randomRecords(9, 60, 900)
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			name := filepath.Join(dir, fmt.Sprintf("log-%v", cached))
			f, err := os.Create(name)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			w := NewWriter(f, WriterOptions{LogNum: 3, ZeroAhead: ahead, cachedZeros: cached})
			writeRecords(t, w, recs, func(int) bool { return true })
			size := w.Size()
			resident := residentPages(t, name) // before a read brings every page in
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			wantCached := cached || !directHere
			lo, hi := int64(ahead), int64(2*ahead+pageSize) // the zeroer's steps
			if wantCached {
				lo, hi = ahead-ahead/8, ahead+pageSize
			}
			zeros := int64(len(data)) - size
			if zeros < lo || zeros > hi || bytes.ContainsFunc(data[size:], func(r rune) bool { return r != 0 }) {
				t.Fatalf("%d bytes past the log's end of %d, want %d to %d zeros", zeros, size, lo, hi)
			}
			if res := readLog(t, data, 3); res.err != nil || len(res.recs) != len(recs) {
				t.Fatalf("read %d of %d records: %v", len(res.recs), len(recs), res.err)
			}
			logPages := int(alignPage(size) / pageSize)
			for i := range logPages {
				if !resident[i] {
					t.Fatalf("page %d of the log is not cached", i)
				}
			}
			cachedZeros := 0
			for _, r := range resident[logPages:] {
				if r {
					cachedZeros++
				}
			}
			if zeroPages := len(resident) - logPages; wantCached && cachedZeros != zeroPages || !wantCached && cachedZeros != 0 {
				t.Fatalf("%d of the %d pages of zeros are cached, want them all cached: %v (direct I/O here: %v)", cachedZeros, zeroPages, wantCached, directHere)
			}
			t.Logf("direct I/O here: %v; %d pages of zeros, %d cached", directHere, len(resident)-logPages, cachedZeros)
		})
	}
}

// TestZeroerKeepsOffTheLog writes logs whose unsynced records, up to
// 192 KiB each, overtake the zeroer while it writes the zeros a sync asked
// for, over new and reused files: every record reads back whole, and
// past the log's end the file holds zeros, then the older file's bytes.
func TestZeroerKeepsOffTheLog(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			var older []byte
			if seed%2 == 1 {
				older = bytes.Repeat([]byte{0xab}, 2<<20)
			}
			name := filepath.Join(t.TempDir(), "log")
			writeSynced(t, name, older)
			f, err := os.OpenFile(name, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			recs := make([][]byte, 40)
			for i := range recs {
				recs[i] = record(int(seed)*1000+i, rng.IntN(192<<10))
			}
			w := NewWriter(f, WriterOptions{LogNum: 5, ZeroAhead: 1 << 20, Allocated: int64(len(older))})
			writeRecords(t, w, recs, func(int) bool { return rng.IntN(3) == 0 })
			size := w.Size()
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if res := readLog(t, data, 5); res.err != nil || len(res.recs) != len(recs) {
				t.Fatalf("read %d of %d records: %v", len(res.recs), len(recs), res.err)
			}
			for i, r := range readLog(t, data, 5).recs {
				if !bytes.Equal(r, recs[i]) {
					t.Fatalf("record %d differs", i)
				}
			}
			rest := data[size:]
			end := bytes.IndexFunc(rest, func(r rune) bool { return r != 0 })
			if end < 0 {
				end = len(rest)
			}
			if tail := rest[end:]; len(tail) > 0 && (len(older) == 0 || !bytes.Equal(tail, older[int(size)+end:])) {
				t.Fatalf("past the log's end and %d zeros, %d bytes that are not the older file's", end, len(tail))
			}
		})
	}
}

// TestLogOvertakingTheZeroerKeepsItsPage: a synced round that ends past
// the zeros, mid-page, leaves that page to the log; once the zeroer's
// zeros pass it, a small record ending in the same page must not have
// the page zeroed as one the cache lacks (zeroLastPage), which would wipe
// the synced record before it.
func TestLogOvertakingTheZeroerKeepsItsPage(t *testing.T) {
	name := filepath.Join(t.TempDir(), "log")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := NewWriter(f, WriterOptions{LogNum: 5, ZeroAhead: 256 << 10})
	var recs [][]byte
	write := func(n int, sync bool) {
		t.Helper()
		p := record(len(recs), n)
		recs = append(recs, p)
		end, err := w.WriteRecord(p)
		if err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := w.SyncTo(end); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(100, true) // starts the zeroer
	for range 4 {
		write(600<<10, true) // past the zeros asked for
		time.Sleep(20 * time.Millisecond)
		write(10, true) // ends in the page the round before ended in
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	res := readLog(t, data, 5)
	if res.err != nil || len(res.recs) != len(recs) {
		t.Fatalf("read %d of %d records: %v", len(res.recs), len(recs), res.err)
	}
}
