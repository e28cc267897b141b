package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// The engine writes logs through its vfs.
var _ SyncFile = vfs.File(nil)

func TestRoundTripSizes(t *testing.T) {
	sizes := []int{
		0, 1, 2, 100,
		maxPayload - 1, maxPayload, maxPayload + 1, // around one block
		BlockSize - 1, BlockSize, BlockSize + 1,
		2*maxPayload - HeaderSize, 2 * maxPayload, // two blocks exactly
		5*BlockSize + 123, // many blocks
		1 << 20,
		0, 0, 7,
	}
	var recs [][]byte
	for i, n := range sizes {
		recs = append(recs, record(i, n))
	}
	f, ends := writeLog(t, recs, nil)
	data, _ := f.snapshot()
	res := readAll(t, data)
	if res.err != nil || res.torn {
		t.Fatalf("read ended with err=%v torn=%v", res.err, res.torn)
	}
	checkPrefix(t, res.recs, recs)
	if len(res.recs) != len(recs) {
		t.Fatalf("read %d records, want %d", len(res.recs), len(recs))
	}
	if res.off != ends[len(ends)-1] {
		t.Fatalf("intact prefix ends at %d, want %d", res.off, ends[len(ends)-1])
	}
}

func TestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		var recs [][]byte
		for i := range rng.IntN(200) {
			var n int
			switch rng.IntN(4) {
			case 0:
				n = rng.IntN(20)
			case 1:
				n = rng.IntN(1000)
			case 2:
				n = rng.IntN(BlockSize)
			default:
				n = rng.IntN(4 * BlockSize)
			}
			recs = append(recs, record(trial*1000+i, n))
		}
		f, ends := writeLog(t, recs, func(int) bool { return rng.IntN(3) == 0 })
		data, _ := f.snapshot()
		r := NewReader(bytes.NewReader(data), int64(len(data)))
		for i, want := range recs {
			got, err := r.Next()
			if err != nil {
				t.Fatalf("trial %d record %d: %v", trial, i, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("trial %d record %d: contents differ", trial, i)
			}
			if _, off := r.TornTail(); off != ends[i] {
				t.Fatalf("trial %d record %d: ends at %d, writer said %d", trial, i, off, ends[i])
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("trial %d: after the last record: %v", trial, err)
		}
	}
}

// TestBlockLayout checks chunk placement at block boundaries: a chunk that
// exactly fills a block, a remainder smaller than a header (zero-filled,
// even in recycled blocks that held other bytes), and a remainder of
// exactly one header (an empty first chunk).
func TestBlockLayout(t *testing.T) {
	t.Run("exact fill", func(t *testing.T) {
		recs := [][]byte{record(0, maxPayload), record(1, 10)}
		f, ends := writeLog(t, recs, nil)
		if ends[0] != BlockSize || ends[1] != BlockSize+HeaderSize+10 {
			t.Fatalf("ends = %v", ends)
		}
		data, _ := f.snapshot()
		if got := data[10]; got != chunkFull {
			t.Fatalf("first chunk type %d, want full", got)
		}
		checkPrefix(t, readAll(t, data).recs, recs)
	})
	t.Run("header-sized remainder", func(t *testing.T) {
		recs := [][]byte{record(0, maxPayload-HeaderSize), record(1, 10)}
		f, _ := writeLog(t, recs, nil)
		data, _ := f.snapshot()
		h := layout{}.decodeHeader(data[BlockSize-HeaderSize:])
		if h.typ != chunkFirst || h.length != 0 {
			t.Fatalf("chunk in the last %d bytes: type %d length %d, want an empty first chunk", HeaderSize, h.typ, h.length)
		}
		res := readAll(t, data)
		checkPrefix(t, res.recs, recs)
		if len(res.recs) != 2 {
			t.Fatalf("read %d records", len(res.recs))
		}
	})
	t.Run("zero-filled trailer", func(t *testing.T) {
		// Every block ends with a trailer of 1..HeaderSize-1 bytes; the
		// payload bytes are 0xff so a recycled block would show stale
		// bytes in a trailer that was not cleared.
		var recs [][]byte
		var trailers []int
		for i := range 200 {
			tr := 1 + i%(HeaderSize-1)
			p := bytes.Repeat([]byte{0xff}, maxPayload-tr)
			recs = append(recs, p)
			trailers = append(trailers, tr)
		}
		f := &memFile{}
		w := NewWriter(f, WriterOptions{MaxBuffered: 2 * BlockSize})
		for i, p := range recs {
			end, err := w.WriteRecord(p)
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(i)*BlockSize + BlockSize - int64(trailers[i]); end != want {
				t.Fatalf("record %d ends at %d, want %d", i, end, want)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		data, _ := f.snapshot()
		for i, tr := range trailers[:len(trailers)-1] {
			blockEnd := (i + 1) * BlockSize
			if !bytes.Equal(data[blockEnd-tr:blockEnd], make([]byte, tr)) {
				t.Fatalf("trailer of block %d is %x, want zeros", i, data[blockEnd-tr:blockEnd])
			}
		}
		res := readAll(t, data)
		if res.err != nil || res.torn || len(res.recs) != len(recs) {
			t.Fatalf("read %d records, err=%v torn=%v", len(res.recs), res.err, res.torn)
		}
		checkPrefix(t, res.recs, recs)
	})
}

func TestConcurrentSyncTo(t *testing.T) {
	const writers, perWriter = 8, 200
	f := &memFile{}
	w := NewWriter(f, WriterOptions{})
	var commit sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			for i := range perWriter {
				p := fmt.Appendf(nil, "writer %d record %d %s", g, i, bytes.Repeat([]byte{'x'}, (g*perWriter+i)%3000))
				commit.Lock()
				end, err := w.WriteRecord(p)
				commit.Unlock()
				if err == nil {
					err = w.SyncTo(end)
				}
				if err != nil {
					errs <- err
					return
				}
				if synced := f.syncedLen(); int64(synced) < end {
					errs <- fmt.Errorf("SyncTo(%d) returned with only %d bytes synced", end, synced)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := f.snapshot()
	res := readAll(t, data)
	if res.err != nil || res.torn || len(res.recs) != writers*perWriter {
		t.Fatalf("read %d records, err=%v torn=%v", len(res.recs), res.err, res.torn)
	}
	next := make([]int, writers)
	for _, rec := range res.recs {
		var g, i int
		if _, err := fmt.Sscanf(string(rec), "writer %d record %d", &g, &i); err != nil {
			t.Fatalf("record %q: %v", rec[:min(len(rec), 40)], err)
		}
		if i != next[g] {
			t.Fatalf("writer %d: record %d follows %d", g, i, next[g]-1)
		}
		next[g]++
	}
	if f.syncs >= writers*perWriter {
		t.Logf("no fsync was shared: %d fsyncs for %d records", f.syncs, writers*perWriter)
	}
}

// gatedSyncFile is a memFile whose first Sync waits until release is
// closed, so a test can line committers up behind an fsync in progress
// instead of hoping the scheduler does.
type gatedSyncFile struct {
	*memFile
	once sync.Once
	// entered is closed when the first Sync starts.
	entered chan struct{}
	release chan struct{}
}

func newGatedSyncFile() *gatedSyncFile {
	return &gatedSyncFile{memFile: &memFile{}, entered: make(chan struct{}), release: make(chan struct{})}
}

func (f *gatedSyncFile) Sync() error {
	first := false
	f.once.Do(func() {
		first = true
		close(f.entered)
	})
	if first {
		<-f.release
	}
	return f.memFile.Sync()
}

// TestGroupCommitSharesFsyncs checks that committers who ask for
// durability while an fsync runs are all covered by the next one. The
// first fsync is held until every committer waits in SyncTo, so the count
// does not depend on timing: one fsync for whatever it started with, one
// for everyone else. OnSync reports each fsync with the committers it
// served: every committer exactly once.
func TestGroupCommitSharesFsyncs(t *testing.T) {
	const writers = 16
	f := newGatedSyncFile()
	var reported []int // OnSync's waiters, fsync by fsync
	var reportedMu sync.Mutex
	w := NewWriter(f, WriterOptions{OnSync: func(d time.Duration, waiters int) {
		reportedMu.Lock()
		reported = append(reported, waiters)
		reportedMu.Unlock()
		if d < 0 {
			t.Errorf("OnSync reported an fsync of %v", d)
		}
	}})
	var commit sync.Mutex
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			commit.Lock()
			end, err := w.WriteRecord(record(g, 100))
			commit.Unlock()
			if err == nil {
				err = w.SyncTo(end)
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	<-f.entered
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		waiting := w.waiting
		w.mu.Unlock()
		if waiting == writers {
			break
		}
		if time.Now().After(deadline) {
			close(f.release)
			t.Fatalf("only %d of %d committers reached SyncTo", waiting, writers)
		}
		time.Sleep(100 * time.Microsecond)
	}
	close(f.release)
	wg.Wait()
	f.mu.Lock()
	syncs, synced := f.syncs, f.synced
	f.mu.Unlock()
	if size := w.Size(); int64(synced) != size {
		t.Fatalf("%d of %d bytes durable after every SyncTo returned", synced, size)
	}
	if syncs > 2 {
		t.Fatalf("%d fsyncs for %d committers that all waited together; want at most 2", syncs, writers)
	}
	reportedMu.Lock()
	groups := slices.Clone(reported)
	reportedMu.Unlock()
	sum := 0
	for _, n := range groups {
		sum += n
	}
	if len(groups) != syncs || sum != writers {
		t.Fatalf("OnSync reported groups %v for %d fsyncs of %d committers", groups, syncs, writers)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestUnsyncedRecordsReachFile checks that records nobody syncs are still
// handed to the file promptly, so they survive a process crash.
// waitFileHolds waits until the writer's background goroutine has written
// the first end bytes to f, failing the test after five seconds.
func waitFileHolds(t *testing.T, f *memFile, end int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for int64(f.len()) < end {
		if time.Now().After(deadline) {
			t.Fatalf("file holds %d bytes, want %d", f.len(), end)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// waitRoundDone waits until the flusher has written out everything up to
// end and finished its round (including any fsync or writeback in it).
func waitRoundDone(w *Writer, end int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.pending || w.flushed < end {
		w.mu.Unlock()
		time.Sleep(100 * time.Microsecond)
		w.mu.Lock()
	}
}

func TestUnsyncedRecordsReachFile(t *testing.T) {
	f := &memFile{}
	w := NewWriter(f, WriterOptions{})
	defer w.Close()
	for i := range 3 {
		end, err := w.WriteRecord(record(i, 100*i))
		if err != nil {
			t.Fatal(err)
		}
		waitFileHolds(t, f, end)
	}
	if f.syncs != 0 {
		t.Fatalf("%d fsyncs without a SyncTo", f.syncs)
	}
}

// TestBytesPerSync checks that a writer with BytesPerSync fsyncs on its
// own once that much was written out unsynced, so that Close has at most
// about that much left to make durable, and that without it nothing is
// fsynced before Close.
func TestBytesPerSync(t *testing.T) {
	for _, perSync := range []int{0, 64 << 10} {
		f := &memFile{}
		w := NewWriter(f, WriterOptions{BytesPerSync: perSync})
		var end int64
		for i := range 64 {
			var err error
			if end, err = w.WriteRecord(record(i, 8<<10)); err != nil {
				t.Fatal(err)
			}
		}
		// Wait until everything reached the file, then for the flusher
		// to finish its round.
		waitFileHolds(t, f, end)
		waitRoundDone(w, end)
		synced := f.syncedLen()
		if perSync == 0 && synced != 0 {
			t.Fatalf("without BytesPerSync %d bytes were fsynced before Close", synced)
		}
		if perSync > 0 && end-int64(synced) >= int64(perSync)+int64(BlockSize) {
			t.Fatalf("BytesPerSync %d: %d of %d bytes left unsynced", perSync, end-int64(synced), end)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if f.syncedLen() != f.len() {
			t.Fatalf("Close left %d of %d bytes unsynced", f.len()-f.syncedLen(), f.len())
		}
	}
}

func TestStickyErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		file *memFile
	}{
		{"write", &memFile{writeErr: errInjected, failWriteAfter: 1000}},
		{"sync", &memFile{syncErr: errInjected}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWriter(tc.file, WriterOptions{})
			var err error
			for i := 0; err == nil && i < 100; i++ {
				var end int64
				end, err = w.WriteRecord(record(i, 300))
				if err == nil {
					err = w.SyncTo(end)
				}
			}
			if !errors.Is(err, errInjected) {
				t.Fatalf("got %v, want the injected failure", err)
			}
			// Every later call fails the same way, even once the file
			// would work again.
			tc.file.mu.Lock()
			tc.file.writeErr, tc.file.syncErr = nil, nil
			tc.file.mu.Unlock()
			if _, err := w.WriteRecord([]byte("after")); !errors.Is(err, errInjected) {
				t.Fatalf("WriteRecord after failure: %v", err)
			}
			if err := w.SyncTo(w.Size()); !errors.Is(err, errInjected) {
				t.Fatalf("SyncTo after failure: %v", err)
			}
			if err := w.Close(); !errors.Is(err, errInjected) {
				t.Fatalf("Close after failure: %v", err)
			}
			if err := w.Close(); !errors.Is(err, errInjected) {
				t.Fatalf("second Close after failure: %v", err)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	f := &memFile{}
	w := NewWriter(f, WriterOptions{})
	end, err := w.WriteRecord([]byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.SyncTo(end + 1); err == nil {
		t.Fatalf("SyncTo beyond the log's size succeeded")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, synced := f.snapshot(); int64(synced) != end {
		t.Fatalf("Close left %d of %d bytes synced", synced, end)
	}
	if _, err := w.WriteRecord([]byte("two")); !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("WriteRecord after Close: %v", err)
	}
	if err := w.SyncTo(end); err != nil {
		t.Fatalf("SyncTo of durable data after Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestBackpressure checks that WriteRecord blocks, rather than buffering
// without bound, while the file does not accept writes.
func TestBackpressure(t *testing.T) {
	gate := make(chan struct{})
	f := &memFile{gate: gate}
	const maxBuffered = 4 * BlockSize
	w := NewWriter(f, WriterOptions{MaxBuffered: maxBuffered})
	blocked := make(chan int64)
	go func() {
		var end int64
		for end <= 3*maxBuffered {
			var err error
			if end, err = w.WriteRecord(record(0, 1000)); err != nil {
				t.Error(err)
				break
			}
		}
		blocked <- end
	}()
	// The writer goroutine is stuck in Write until the gate opens, so the
	// appender must stall near the bound.
	select {
	case end := <-blocked:
		t.Fatalf("appended %d bytes while the file accepted none", end)
	case <-time.After(200 * time.Millisecond):
	}
	if size := w.Size(); size > maxBuffered+BlockSize {
		t.Fatalf("buffered %d bytes, bound is %d", size, maxBuffered)
	}
	close(gate)
	if end := <-blocked; end <= 3*maxBuffered {
		t.Fatalf("appender stopped at %d", end)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestWriteRecordDoesNotAllocate(t *testing.T) {
	f := &memFile{}
	w := NewWriter(f, WriterOptions{})
	defer w.Close()
	p := record(0, 200)
	// Warm up: fill the block pool.
	for range 2000 {
		if _, err := w.WriteRecord(p); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := w.WriteRecord(p); err != nil {
			t.Fatal(err)
		}
	})
	// The memFile's own appends allocate as it grows; the writer itself
	// should add nothing per record.
	if allocs > 0.1 {
		t.Fatalf("%.2f allocations per WriteRecord", allocs)
	}
}

// TestWritersShareBlocks writes two segments in turn through Writers that
// share a BlockPool, as a DB's successive WAL segments do: the second
// takes the blocks the first gave back instead of allocating its own, the
// pool keeps no more than its bound, and both segments read back whole.
func TestWritersShareBlocks(t *testing.T) {
	const maxBuffered = 4 * BlockSize
	pool := NewBlockPool(maxBuffered)
	var segments [][][]byte
	var files []*memFile
	freeAfterFirst := 0
	for s := range 2 {
		f := &memFile{}
		w := NewWriter(f, WriterOptions{MaxBuffered: maxBuffered, Blocks: pool})
		if s == 1 && len(pool.free) != freeAfterFirst-1 {
			t.Fatalf("the second writer left %d free blocks of %d: it did not take its first from the pool", len(pool.free), freeAfterFirst)
		}
		var recs [][]byte
		for i := range 300 {
			p := record(s*1000+i, 100+i*7%900)
			recs = append(recs, p)
			end, err := w.WriteRecord(p)
			if err != nil {
				t.Fatal(err)
			}
			if i%50 == 49 {
				if err := w.SyncTo(end); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if s == 0 {
			freeAfterFirst = len(pool.free)
			if freeAfterFirst < 2 {
				t.Fatalf("after its Close the first writer gave back %d blocks", freeAfterFirst)
			}
		}
		if len(pool.free) > pool.max {
			t.Fatalf("the pool keeps %d blocks, more than its bound %d", len(pool.free), pool.max)
		}
		segments, files = append(segments, recs), append(files, f)
	}
	for s, f := range files {
		data, _ := f.snapshot()
		got := readAll(t, data)
		if got.err != nil || got.torn || len(got.recs) != len(segments[s]) {
			t.Fatalf("segment %d read back %d of %d records (err %v, torn %v)", s, len(got.recs), len(segments[s]), got.err, got.torn)
		}
		checkPrefix(t, got.recs, segments[s])
	}
}
