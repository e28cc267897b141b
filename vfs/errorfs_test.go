package vfs

import (
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
)

func TestErrorFSInjects(t *testing.T) {
	e := NewErrorFS(NewMem(), 1)
	e.Inject(Fault{Op: OpWrite, Match: ".log", After: 1, Short: true})
	e.Inject(Fault{Op: OpSync, Match: ".sst", Err: syscall.ENOSPC, Sticky: true})
	e.Inject(Fault{Op: OpRename, Match: "CURRENT"})

	f, err := e.Create("/000001.log")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("first")); err != nil {
		t.Fatalf("the write before After failed: %v", err)
	}
	n, err := f.Write([]byte("second"))
	if !errors.Is(err, syscall.EIO) || n != 3 {
		t.Fatalf("short write: %d, %v; want 3, EIO", n, err)
	}
	if _, err := f.Write([]byte("third")); err != nil {
		t.Fatalf("a once-only fault fired again: %v", err)
	}
	r, _ := e.Open("/000001.log")
	if data, _ := io.ReadAll(r); string(data) != "firstsecthird" {
		t.Fatalf("file holds %q", data)
	}

	s, _ := e.Create("/000002.sst")
	for range 2 {
		if err := s.Sync(); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("sticky sync fault: %v", err)
		}
	}
	e.Create("/CURRENT.tmp")
	if err := e.Rename("/CURRENT.tmp", "/CURRENT"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("rename fault: %v", err)
	}
	if err := e.Rename("/CURRENT.tmp", "/CURRENT"); err != nil {
		t.Fatalf("second rename: %v", err)
	}
	if n, log := e.Injected(); n != 4 || len(log) != 4 {
		t.Fatalf("injected %d: %v", n, log)
	}
	e.Disarm()
	if err := s.Sync(); err != nil {
		t.Fatalf("sync after Disarm: %v", err)
	}
}

func TestErrorFSProbability(t *testing.T) {
	e := NewErrorFS(NewMem(), 7)
	e.Inject(Fault{Op: OpWrite, Probability: 0.5, Sticky: true})
	f, _ := e.Create("/x")
	failed := 0
	for range 1000 {
		if _, err := f.Write([]byte("x")); err != nil {
			failed++
		}
	}
	if failed < 400 || failed > 600 {
		t.Fatalf("%d of 1000 writes failed at probability 0.5", failed)
	}
}

// TestErrorFSEveryOp fires a fault on the nth call of each operation and
// checks that the calls before it and the one after it go through.
func TestErrorFSEveryOp(t *testing.T) {
	calls := map[Op]func(e *ErrorFS) error{
		OpCreate:   func(e *ErrorFS) error { _, err := e.Create("/d/f"); return err },
		OpOpen:     func(e *ErrorFS) error { _, err := e.Open("/d/f"); return err },
		OpOpenDir:  func(e *ErrorFS) error { _, err := e.OpenDir("/d"); return err },
		OpRemove:   func(e *ErrorFS) error { e.Create("/d/g"); return e.Remove("/d/g") },
		OpRename:   func(e *ErrorFS) error { e.Create("/d/g"); return e.Rename("/d/g", "/d/h") },
		OpMkdirAll: func(e *ErrorFS) error { return e.MkdirAll("/d/sub", 0o700) },
		OpList:     func(e *ErrorFS) error { _, err := e.List("/d"); return err },
		OpStat:     func(e *ErrorFS) error { _, err := e.Stat("/d/f"); return err },
		OpLock: func(e *ErrorFS) error {
			l, err := e.Lock("/d/LOCK")
			if err == nil {
				l.Close()
			}
			return err
		},
		OpWrite: func(e *ErrorFS) error { f, _ := e.Create("/d/w"); _, err := f.Write([]byte("x")); return err },
		OpRead: func(e *ErrorFS) error {
			f, _ := e.Open("/d/f")
			_, err := f.ReadAt(make([]byte, 1), 0)
			return err
		},
		OpSync:    func(e *ErrorFS) error { f, _ := e.Create("/d/s"); return f.Sync() },
		OpSyncDir: func(e *ErrorFS) error { return SyncDir(e, "/d") },
		OpClose:   func(e *ErrorFS) error { f, _ := e.Open("/d/f"); return f.Close() },
	}
	for op, call := range calls {
		t.Run(op.String(), func(t *testing.T) {
			mem := NewMem()
			mem.MkdirAll("/d", 0o700)
			f, _ := mem.Create("/d/f")
			f.Write([]byte("data"))
			e := NewErrorFS(mem, 1)
			e.Inject(Fault{Op: op, After: 2, Err: syscall.ENOSPC})
			for i := range 4 {
				err := call(e)
				if fail := i == 2; fail != errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("call %d: %v (want a fault only on the third)", i+1, err)
				}
			}
			if n, log := e.Injected(); n != 1 || !strings.HasPrefix(log[0], op.String()+" ") {
				t.Fatalf("injected %d: %v", n, log)
			}
		})
	}
}

// TestErrorFSMatch fires faults only on the files they name, and a sticky
// fault on every later call.
func TestErrorFSMatch(t *testing.T) {
	e := NewErrorFS(NewMem(), 1)
	e.Inject(Fault{Op: OpCreate, Match: "MANIFEST", Sticky: true})
	if _, err := e.Create("/000001.log"); err != nil {
		t.Fatalf("a fault on MANIFEST hit a WAL: %v", err)
	}
	for range 3 {
		if _, err := e.Create("/MANIFEST-000002"); !errors.Is(err, syscall.EIO) {
			t.Fatalf("sticky fault: %v", err)
		}
	}
	if _, err := e.Open("/MANIFEST-000002"); err == nil {
		t.Fatal("a failed Create created the file")
	}
}

// TestErrorFSProbabilityIsSeeded: the same seed fails the same calls.
func TestErrorFSProbabilityIsSeeded(t *testing.T) {
	pattern := func(seed uint64) string {
		e := NewErrorFS(NewMem(), seed)
		e.Inject(Fault{Op: OpSync, Probability: 0.3, Sticky: true})
		f, _ := e.Create("/x")
		var b strings.Builder
		for range 64 {
			if f.Sync() != nil {
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	if a, b := pattern(3), pattern(3); a != b {
		t.Fatalf("seed 3 gave %s then %s", a, b)
	}
	if pattern(3) == pattern(4) {
		t.Fatal("seeds 3 and 4 failed the same calls")
	}
}

// TestErrorFSFollowing holds a fault back until the call it follows: the
// directory syncs before CURRENT's rename neither count nor fail.
func TestErrorFSFollowing(t *testing.T) {
	e := NewErrorFS(NewMem(), 1)
	e.Inject(Fault{Op: OpSyncDir, Following: OpRename, FollowingMatch: "CURRENT"})
	dir, err := e.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := dir.Sync(); err != nil {
			t.Fatalf("a directory sync before the rename failed: %v", err)
		}
	}
	f, _ := e.Create("/000001.tmp")
	f.Close()
	if err := e.Rename("/000001.tmp", "/000002.log"); err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatalf("a directory sync after another rename failed: %v", err)
	}
	f, _ = e.Create("/000003.tmp")
	f.Close()
	if err := e.Rename("/000003.tmp", "/CURRENT"); err != nil {
		t.Fatalf("the rename the fault follows failed: %v", err)
	}
	if err := dir.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the directory sync after CURRENT's rename: %v, want EIO", err)
	}
	if err := dir.Sync(); err != nil {
		t.Fatalf("a once-only fault fired again: %v", err)
	}
}
