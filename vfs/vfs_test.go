package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"path/filepath"
	"runtime"
	"testing"
)

func TestLockIsExclusive(t *testing.T) {
	fs := Default()
	name := filepath.Join(t.TempDir(), "LOCK")
	l, err := fs.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lock(name); err == nil {
		t.Fatal("second Lock of a held lock succeeded")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := fs.Lock(name)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	l2.Close()
}

func TestCreateWriteSyncRead(t *testing.T) {
	fs := Default()
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	f, err := fs.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := SyncDir(fs, dir); err != nil {
		t.Fatal(err)
	}
	r, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 5)
	if _, err := r.ReadAt(buf, 0); err != nil || string(buf) != "hello" {
		t.Fatalf("ReadAt = %q, %v", buf, err)
	}
	names, err := fs.List(dir)
	if err != nil || len(names) != 1 || names[0] != "f" {
		t.Fatalf("List = %v, %v", names, err)
	}
}

// TestFilesystems runs the same checks on every implementation.
func TestFilesystems(t *testing.T) {
	for name, fs := range map[string]FS{"os": Default(), "mem": NewMem()} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "sub", "dir")
			if err := fs.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			a := filepath.Join(dir, "a")
			f, err := fs.Create(a)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("one "))
			f.Write([]byte("two"))
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := SyncDir(fs, dir); err != nil {
				t.Fatal(err)
			}
			if err := fs.Rename(a, filepath.Join(dir, "b")); err != nil {
				t.Fatal(err)
			}
			if _, err := fs.Open(a); err == nil {
				t.Fatal("old name still opens after Rename")
			}
			r, err := fs.Open(filepath.Join(dir, "b"))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(r)
			r.Close()
			if string(got) != "one two" {
				t.Fatalf("content %q", got)
			}
			info, err := fs.Stat(filepath.Join(dir, "b"))
			if err != nil || info.Size() != 7 {
				t.Fatalf("Stat = %v, %v", info, err)
			}
			names, err := fs.List(dir)
			if err != nil || fmt.Sprint(names) != "[b]" {
				t.Fatalf("List = %v, %v", names, err)
			}
			// Reuse renames the file and writes over it from its start.
			w, err := fs.Reuse(filepath.Join(dir, "b"), filepath.Join(dir, "c"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte("ONE")); err != nil {
				t.Fatal(err)
			}
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			if _, err := fs.Stat(filepath.Join(dir, "b")); !errors.Is(err, iofs.ErrNotExist) {
				t.Fatalf("Stat of the reused file's old name: %v", err)
			}
			r, err = fs.Open(filepath.Join(dir, "c"))
			if err != nil {
				t.Fatal(err)
			}
			got, _ = io.ReadAll(r)
			r.Close()
			if string(got) != "ONE two" {
				t.Fatalf("reused file holds %q, want %q", got, "ONE two")
			}
			if err := fs.Rename(filepath.Join(dir, "c"), filepath.Join(dir, "b")); err != nil {
				t.Fatal(err)
			}
			if err := fs.Remove(filepath.Join(dir, "b")); err != nil {
				t.Fatal(err)
			}
			if _, err := fs.Stat(filepath.Join(dir, "b")); !errors.Is(err, iofs.ErrNotExist) {
				t.Fatalf("Stat after Remove: %v", err)
			}
			l, err := fs.Lock(filepath.Join(dir, "LOCK"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fs.Lock(filepath.Join(dir, "LOCK")); err == nil {
				t.Fatal("second Lock succeeded")
			}
			l.Close()
		})
	}
}

// fdCallsHere says whether this platform makes the engine's system calls
// on its files (fadvise, sync_file_range: fd_linux.go).
var fdCallsHere = runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64")

// TestStartWriteback: an OS file's writeback starts where the platform
// can; a file with no descriptor reports that it cannot.
func TestStartWriteback(t *testing.T) {
	f, err := Default().Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if got := StartWriteback(f, 0, 64<<10); got != fdCallsHere {
		t.Fatalf("StartWriteback on an OS file: %v, want %v on %s/%s", got, fdCallsHere, runtime.GOOS, runtime.GOARCH)
	}
	mf, err := NewMem().Create("log")
	if err != nil {
		t.Fatal(err)
	}
	if StartWriteback(mf, 0, 0) {
		t.Fatal("StartWriteback on a file with no descriptor reported success")
	}
}

// TestDataSync: an OS file's data syncs with fdatasync where the platform
// has it, with no allocation, and a failure is returned; any other file
// is synced with its own Sync, whose error comes back.
func TestDataSync(t *testing.T) {
	f, err := Default().Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if got := dataSync(f) != nil; got != fdCallsHere {
		t.Fatalf("an OS file has an fdatasync: %v, want %v on %s/%s", got, fdCallsHere, runtime.GOOS, runtime.GOARCH)
	}
	sync := DataSync(f)
	if n := testing.AllocsPerRun(10, func() {
		if err := sync(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("a sync allocates %v times", n)
	}
	f.Close()
	if err := sync(); err == nil {
		t.Fatal("a sync of a closed file reported success")
	}

	mf, err := NewMem().Create("log")
	if err != nil {
		t.Fatal(err)
	}
	failing := errors.New("injected")
	cf := &countingSync{File: mf}
	sync = DataSync(cf)
	if err := sync(); err != nil || cf.syncs != 1 {
		t.Fatalf("a sync of a file with no descriptor: %v after %d Syncs, want nil after 1", err, cf.syncs)
	}
	cf.err = failing
	if err := sync(); !errors.Is(err, failing) || cf.syncs != 2 {
		t.Fatalf("a sync of a file whose Sync fails: %v after %d Syncs, want the Sync's error after 2", err, cf.syncs)
	}
}

// countingSync counts its Syncs and fails them with err, when set.
type countingSync struct {
	File
	syncs int
	err   error
}

func (f *countingSync) Sync() error {
	f.syncs++
	if f.err != nil {
		return f.err
	}
	return f.File.Sync()
}

// TestAdviseRandomReads: an OS file advised for random reads still reads
// back what was written, before and after a prefetch of part of it, and
// can prefetch where the platform has posix_fadvise; a file of another
// filesystem comes back unchanged.
func TestAdviseRandomReads(t *testing.T) {
	fs := Default()
	name := filepath.Join(t.TempDir(), "table")
	want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	if err := WriteFileAtomic(fs, name, want); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	f = AdviseRandomReads(f)
	defer f.Close()
	p, ok := f.(Prefetcher)
	if ok != fdCallsHere {
		t.Fatalf("the advised OS file is a Prefetcher: %v, on %s/%s", ok, runtime.GOOS, runtime.GOARCH)
	}
	got := make([]byte, 4096)
	for _, off := range []int64{512 << 10, 0, 1<<20 - 4096} {
		if ok {
			p.Prefetch(off, 256<<10)
		}
		if _, err := f.ReadAt(got, off); err != nil || !bytes.Equal(got, want[off:off+4096]) {
			t.Fatalf("read at %d: %v, or not what was written", off, err)
		}
	}
	mem := NewMem()
	mf, err := mem.Create("x")
	if err != nil {
		t.Fatal(err)
	}
	if AdviseRandomReads(mf) != mf {
		t.Fatal("a MemFS file was wrapped")
	}
}
