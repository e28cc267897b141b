package lsm

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tabuladb/tabula/vfs"
)

// TestTableWritebackEveryMiB checks that a table's writer asks for the
// writeback of each MiB it has written, once, in order, and asks no more
// once an ask fails (a file with no descriptor), writing on as before.
func TestTableWritebackEveryMiB(t *testing.T) {
	chunk := bytes.Repeat([]byte{7}, 64<<10)
	var asked []string
	record := func(ok bool) func(any, int64, int64) bool {
		return func(_ any, off, n int64) bool {
			asked = append(asked, fmt.Sprintf("%d+%d", off>>10, n>>10))
			return ok
		}
	}
	write := func(f vfs.File, start func(any, int64, int64) bool) *writebackWriter {
		t.Helper()
		w := &writebackWriter{f: f, start: start}
		for range 50 { // 3.125 MiB
			if _, err := w.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		return w
	}

	f, err := vfs.Default().Create(filepath.Join(t.TempDir(), "000001.sst"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := write(f, record(true))
	if got, want := fmt.Sprint(asked), "[0+1024 1024+1024 2048+1024]"; got != want || w.written != 50*64<<10 {
		t.Fatalf("writeback asked for (KiB) %s, want %s; %d bytes written", got, want, w.written)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != w.written {
		t.Fatalf("the file holds %v (%v), want %d bytes", fi, err, w.written)
	}

	asked = nil
	mf, err := vfs.NewMem().Create("000002.sst")
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if w := write(mf, record(false)); fmt.Sprint(asked) != "[0+1024]" || !w.off || w.written != 50*64<<10 {
		t.Fatalf("after a failed ask: asked %v, off %v, %d bytes written", asked, w.off, w.written)
	}

	// With the real call on an OS file, the writer keeps asking where the
	// platform can (vfs's tests say where).
	if w, can := write(f, vfs.StartWriteback), vfs.StartWriteback(f, 0, 0); w.off == can {
		t.Fatalf("with vfs.StartWriteback on an OS file (which starts writeback: %v), the writer gave up: %v", can, w.off)
	}
}
