package lsm

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tabuladb/tabula/vfs"
)

// TestTableWritebackEveryMiB checks that a table's writer starts the
// kernel's writeback every tableBytesPerSync bytes on an OS file (where
// the platform can), and gives up at the first attempt on a file with no
// descriptor, writing on as before.
func TestTableWritebackEveryMiB(t *testing.T) {
	canHere := runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64")
	chunk := bytes.Repeat([]byte{7}, 64<<10)
	write := func(f vfs.File) *writebackWriter {
		t.Helper()
		w := &writebackWriter{f: f}
		for range 50 { // 3.125 MiB
			if _, err := w.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		return w
	}

	name := filepath.Join(t.TempDir(), "000001.sst")
	f, err := vfs.Default().Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := write(f)
	if canHere && (w.off || w.started != 3*tableBytesPerSync) {
		t.Fatalf("on an OS file: writeback started up to %d bytes (off: %v), want %d", w.started, w.off, 3*tableBytesPerSync)
	}
	if !canHere && !w.off {
		t.Fatal("writeback reported started where the platform cannot")
	}
	if fi, err := os.Stat(name); err != nil || fi.Size() != w.written {
		t.Fatalf("file holds %v bytes (%v), want %d", fi, err, w.written)
	}

	mem := vfs.NewMem()
	mf, err := mem.Create("000002.sst")
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if w := write(mf); !w.off || w.started != tableBytesPerSync || w.written != 50*64<<10 {
		t.Fatalf("on a file with no descriptor: off %v, started %d, written %d; want true, %d, %d", w.off, w.started, w.written, tableBytesPerSync, 50*64<<10)
	}
}
