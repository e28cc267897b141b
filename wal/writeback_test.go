package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// writebackHere says whether this platform starts writeback without an
// fsync (vfs.StartWriteback).
var writebackHere = runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64")

// TestBytesPerSyncStartsWriteback checks that on an OS file BytesPerSync
// starts the kernel's writeback instead of fsyncing (where the system
// can), so that no fsync holds the flusher up before Close, which still
// fsyncs everything; and that a file with no descriptor gets fsyncs.
func TestBytesPerSyncStartsWriteback(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	var syncs atomic.Int32
	w := NewWriter(f, WriterOptions{BytesPerSync: 64 << 10, OnSync: func(time.Duration, int) { syncs.Add(1) }})
	var end int64
	for i := range 64 {
		if end, err = w.WriteRecord(record(i, 8<<10)); err != nil {
			t.Fatal(err)
		}
	}
	waitRoundDone(w, end)
	if n := syncs.Load(); writebackHere && n != 0 {
		t.Fatalf("%d fsyncs before Close, where writeback can be started without one", n)
	} else if !writebackHere && n == 0 {
		t.Fatal("no fsync before Close, where BytesPerSync must fall back to fsync")
	}
	before := syncs.Load()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Where writeback was started without fsyncs, Close must make one.
	// Elsewhere BytesPerSync's own fsyncs may already have covered the
	// whole log, and Close has none left to make.
	if n := syncs.Load() - before; n > 1 || (writebackHere && n != 1) {
		t.Fatalf("Close made %d fsyncs, want 1 (or 0 where writeback needs fsyncs)", n)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != end {
		t.Fatalf("file of %d bytes, want %d", fi.Size(), end)
	}

	// A file with no descriptor gets fsyncs instead, on every platform.
	syncs.Store(0)
	mw := NewWriter(&memFile{}, WriterOptions{BytesPerSync: 64 << 10, OnSync: func(time.Duration, int) { syncs.Add(1) }})
	for i := range 64 {
		if end, err = mw.WriteRecord(record(i, 8<<10)); err != nil {
			t.Fatal(err)
		}
	}
	waitRoundDone(mw, end)
	if syncs.Load() == 0 {
		t.Fatal("no fsync before Close on a file with no descriptor, where BytesPerSync must fall back to fsync")
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPreviousGatesTheSyncs checks that a Writer with Previous takes
// records at once and hands them to its file, but fsyncs nothing until
// Previous returns; that a SyncTo waits for it; and that Previous's error
// stops the Writer.
func TestPreviousGatesTheSyncs(t *testing.T) {
	release := make(chan error)
	f := &memFile{}
	w := NewWriter(f, WriterOptions{Previous: func() error { return <-release }})
	end, err := w.WriteRecord(record(1, 100))
	if err != nil {
		t.Fatal(err)
	}
	synced := make(chan error, 1)
	go func() { synced <- w.SyncTo(end) }()
	for deadline := time.Now().Add(5 * time.Second); f.len() != int(end); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d bytes reached the file while the previous segment was closing: unsynced writes wait for it", f.len(), end)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if n := f.syncCount(); n != 0 {
		t.Fatalf("%d fsyncs before the previous segment was closed", n)
	}
	select {
	case err := <-synced:
		t.Fatalf("SyncTo returned (%v) before the previous segment was closed", err)
	default:
	}
	release <- nil
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if f.syncedLen() != int(end) {
		t.Fatalf("%d of %d bytes synced", f.syncedLen(), end)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// A Writer that never got a record waits for Previous in Close, and
	// returns its error.
	failed := errors.New("previous segment's fsync failed")
	w = NewWriter(&memFile{}, WriterOptions{Previous: func() error { return failed }})
	if err := w.Close(); !errors.Is(err, failed) {
		t.Fatalf("Close: %v, want the previous segment's error", err)
	}

	// Previous's error stops the Writer like a failed write.
	f = &memFile{}
	w = NewWriter(f, WriterOptions{Previous: func() error { return failed }})
	end, err = w.WriteRecord(record(2, 100))
	if err != nil && !errors.Is(err, failed) {
		t.Fatal(err)
	}
	if err := w.SyncTo(end); !errors.Is(err, failed) {
		t.Fatalf("SyncTo: %v, want the previous segment's error", err)
	}
	if _, err := w.WriteRecord(record(3, 100)); !errors.Is(err, failed) {
		t.Fatalf("WriteRecord after the failure: %v", err)
	}
	if n := f.syncCount(); n != 0 {
		t.Fatalf("%d fsyncs after the previous segment failed", n)
	}
	if err := w.Close(); !errors.Is(err, failed) {
		t.Fatalf("Close: %v", err)
	}
}

// TestZeroAhead checks that on an OS file a recyclable log's fsyncs keep
// zeros ahead of its end (ZeroAhead), written by the zeroer or through
// the page cache, which a reader takes as the log's end; that a version 1 log, a file with no descriptor and a reused file
// with room enough (Allocated) get none; and that the log reads back
// whole in each case.
func TestZeroAhead(t *testing.T) {
	const ahead = 64 << 10
	recs := randomRecords(5, 300, 900)
	write := func(t *testing.T, f SyncFile, opts WriterOptions, synced bool) int64 {
		t.Helper()
		w := NewWriter(f, opts)
		writeRecords(t, w, recs, func(int) bool { return synced })
		return w.Size()
	}
	onDisk := func(t *testing.T, under []byte, opts WriterOptions, synced bool) (data []byte, size int64) {
		t.Helper()
		name := filepath.Join(t.TempDir(), "wal")
		writeSynced(t, name, under)
		f, err := os.OpenFile(name, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		size = write(t, f, opts, synced)
		if data, err = os.ReadFile(name); err != nil {
			t.Fatal(err)
		}
		return data, size
	}
	// zerosPast checks that the log reads back whole from data and is
	// followed by zeros, 7/8 to 1 of ahead of them (to a page boundary)
	// through the cache, 1 to 2 by the zeroer, then by older's bytes.
	zerosPast := func(t *testing.T, data []byte, size int64, older []byte, cached bool) {
		t.Helper()
		if len(older) > 0 && len(data) != len(older) {
			t.Fatalf("the reused file of %d bytes has %d now", len(older), len(data))
		}
		end := int64(len(data))
		if i := bytes.IndexFunc(data[size:], func(r rune) bool { return r != 0 }); i >= 0 {
			end = size + int64(i)
		}
		lo, hi := int64(ahead), int64(2*ahead+pageSize)
		if cached {
			lo, hi = ahead-ahead/8, ahead+pageSize
		}
		if zeros := end - size; zeros < lo || zeros > hi {
			t.Fatalf("%d zeros past the log's end, want %d to %d", zeros, lo, hi)
		}
		if !bytes.Equal(data[end:], older[min(end, int64(len(older))):]) {
			t.Fatal("past the zeros, the file is not the older file's bytes")
		}
		if res := readLog(t, data, 3); res.err != nil || res.torn || len(res.recs) != len(recs) || res.off != size {
			t.Fatalf("read %d of %d records ending at %d (log size %d), err=%v torn=%v", len(res.recs), len(recs), res.off, size, res.err, res.torn)
		}
	}

	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("recyclable cached=%v", cached), func(t *testing.T) {
			data, size := onDisk(t, nil, WriterOptions{LogNum: 3, ZeroAhead: ahead, cachedZeros: cached}, true)
			if !writebackHere { // nothing to check on a system without pwrite here
				return
			}
			zerosPast(t, data, size, nil, cached)
		})
	}
	t.Run("version 1", func(t *testing.T) {
		data, size := onDisk(t, nil, WriterOptions{ZeroAhead: ahead}, true)
		if int64(len(data)) != size {
			t.Fatalf("a version 1 log of %d bytes left a file of %d", size, len(data))
		}
	})
	t.Run("no descriptor", func(t *testing.T) {
		f := &memFile{}
		if size := write(t, f, WriterOptions{LogNum: 3, ZeroAhead: ahead}, true); int64(f.len()) != size {
			t.Fatalf("a log of %d bytes left %d in a file with no descriptor", size, f.len())
		}
	})
	// A reused file is zeroed ahead as a new one is, its older pages
	// dropped from the cache (see TestReusedFileIsNotRead). A log synced
	// only by Close gets no zeros ahead, as nothing follows that fsync:
	// past it, the file holds the older log's bytes but for the rest of
	// the page it ends in (zeroLastPage).
	for _, synced := range []bool{true, false} {
		for _, cached := range []bool{false, true} {
			t.Run(fmt.Sprintf("reused synced=%v cached=%v", synced, cached), func(t *testing.T) {
				older := bytes.Repeat([]byte{0xab}, 1<<20)
				data, size := onDisk(t, older, WriterOptions{LogNum: 3, ZeroAhead: ahead, Allocated: int64(len(older)), cachedZeros: cached}, synced)
				if !writebackHere {
					if !bytes.Equal(data[size:], older[size:]) {
						t.Fatal("the reused file changed past the log's end")
					}
					return
				}
				if synced {
					zerosPast(t, data, size, older, cached)
					return
				}
				page := alignPage(size)
				if len(data) != len(older) || !bytes.Equal(data[page:], older[page:]) || bytes.ContainsFunc(data[size:page], func(r rune) bool { return r != 0 }) {
					t.Fatalf("a log of %d bytes synced by Close only: the reused file past it is not its last page's zeros and the older bytes", size)
				}
				if res := readLog(t, data, 3); res.err != nil || res.torn || len(res.recs) != len(recs) || res.off != size {
					t.Fatalf("read %d of %d records ending at %d (log size %d), err=%v torn=%v", len(res.recs), len(recs), res.off, size, res.err, res.torn)
				}
			})
		}
	}
	// A new file synced only by Close ends with the log.
	t.Run("new synced=false", func(t *testing.T) {
		data, size := onDisk(t, nil, WriterOptions{LogNum: 3, ZeroAhead: ahead}, false)
		if int64(len(data)) != size {
			t.Fatalf("a log of %d bytes synced by Close only left a file of %d", size, len(data))
		}
	})
}

// TestReusedFileIsNotRead checks that writing a log over a reused file
// whose pages the Writer dropped from the cache reads nothing from the
// disk but its first page: a write ending inside a page it does not cover
// whole would make the kernel read the page, so the Writer zeroes that
// page first (not the first: see zeroLastPage). The log's rounds here are
// unsynced hand-offs, each ending mid-page.
func TestReusedFileIsNotRead(t *testing.T) {
	if !writebackHere {
		t.Skip("no posix_fadvise or pwrite here: the reused file's pages stay cached")
	}
	dir := t.TempDir()
	older := bytes.Repeat([]byte{0xab}, 1<<20)
	// The control: a partial write to a dropped page is a read here.
	control := filepath.Join(dir, "control")
	writeSynced(t, control, older)
	readDelta := func(do func()) int64 {
		before := readBytes(t)
		do()
		return readBytes(t) - before
	}
	if got := readDelta(func() {
		f, err := os.OpenFile(control, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if !dropCache(f, int64(len(older))) {
			t.Fatal("dropCache failed on an OS file")
		}
		if _, err := f.WriteAt([]byte("partial"), 3*pageSize+100); err != nil {
			t.Fatal(err)
		}
	}); got == 0 {
		t.Skip("this system does not count the reads a partial write makes")
	}

	recs := randomRecords(7, 60, 500)
	reuse := func(name string) int64 {
		writeSynced(t, name, older)
		f, err := os.OpenFile(name, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return readDelta(func() {
			w := NewWriter(f, WriterOptions{LogNum: 3, ZeroAhead: 64 << 10, Allocated: int64(len(older))})
			writeRecords(t, w, recs, func(i int) bool {
				if i%5 == 4 {
					time.Sleep(3 * handOffDelay) // the record is handed off alone
				}
				return false
			})
		})
	}
	// The first log a process writes reads a page more than the later
	// ones, whichever file it reuses (8 KiB, then 4 KiB, here): a cost
	// of the process, not of the file, which made this test fail when
	// it ran alone. A first log on another file pays it.
	reuse(filepath.Join(dir, "warm"))
	name := filepath.Join(dir, "wal")
	if got := reuse(name); got > pageSize {
		t.Fatalf("writing the log read %d bytes of the reused file, more than its first page", got)
	}
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if res := readLog(t, data, 3); res.err != nil || len(res.recs) != len(recs) {
		t.Fatalf("read %d of %d records, err=%v", len(res.recs), len(recs), res.err)
	}
}

// writeSynced writes data to a new file name and fsyncs it, so that its
// pages are clean (a dropped cache drops only clean pages).
func writeSynced(t *testing.T, name string, data []byte) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// readBytes returns the bytes this process has read from storage
// (read_bytes of /proc/self/io).
func readBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "read_bytes:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("/proc/self/io has no read_bytes")
	return 0
}
