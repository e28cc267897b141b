package wal

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// countingFile counts the fsyncs of a real file.
type countingFile struct {
	*os.File
	syncs atomic.Int64
}

func (f *countingFile) Sync() error {
	f.syncs.Add(1)
	return f.File.Sync()
}

func createBenchFile(b *testing.B) *countingFile {
	b.Helper()
	f, err := os.Create(filepath.Join(b.TempDir(), "000001.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return &countingFile{File: f}
}

// BenchmarkGroupCommit measures durable commits: each writer appends a
// record under a shared commit mutex (as the engine's commit pipeline
// does), then waits for it to be durable. With several writers, records
// that arrive during one fsync share the next.
func BenchmarkGroupCommit(b *testing.B) {
	for _, writers := range []int{1, 8} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			f := createBenchFile(b)
			w := NewWriter(f, WriterOptions{})
			payload := bytes.Repeat([]byte("x"), 128)
			var commit sync.Mutex
			var remaining atomic.Int64
			remaining.Store(int64(b.N))
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range writers {
				wg.Go(func() {
					for remaining.Add(-1) >= 0 {
						commit.Lock()
						end, err := w.WriteRecord(payload)
						commit.Unlock()
						if err == nil {
							err = w.SyncTo(end)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(b.N)/float64(max(f.syncs.Load(), 1)), "records/fsync")
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkWriteRecord measures appends nobody waits to be durable.
func BenchmarkWriteRecord(b *testing.B) {
	for _, size := range []int{128, 4096} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			f := createBenchFile(b)
			w := NewWriter(f, WriterOptions{})
			payload := bytes.Repeat([]byte("x"), size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.WriteRecord(payload); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

func BenchmarkReader(b *testing.B) {
	benchmarkRead(b, benchLog(b, 10000, func(i int) int { return 100 + i%1000 }))
}

// BenchmarkRecoverZeroedTail reads a log whose file runs on in zeros, as
// one zeroed ahead of its end (ZeroAhead) does after a crash: the reader
// scans the zeros for a later synced chunk.
func BenchmarkRecoverZeroedTail(b *testing.B) {
	data := benchLog(b, 100, func(int) int { return 100 })
	benchmarkRead(b, append(data, make([]byte, 2<<20)...))
}

// benchLog returns a log of n records, record i of size(i) bytes.
func benchLog(b *testing.B, n int, size func(i int) int) []byte {
	f := &memFile{}
	w := NewWriter(f, WriterOptions{})
	for i := range n {
		if _, err := w.WriteRecord(record(i, size(i))); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	data, _ := f.snapshot()
	return data
}

// benchmarkRead reads every record of the log file data, b.N times.
func benchmarkRead(b *testing.B, data []byte) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewReader(bytes.NewReader(data), int64(len(data)))
		for {
			if _, err := r.Next(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}
