package vfs

import (
	"errors"
	"io"
	"math/rand/v2"
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

func TestCrashClone(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d", 0o700)
	write := func(name, data string, sync bool) File {
		f, err := m.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(data))
		if sync {
			f.Sync()
		}
		return f
	}
	synced := write("/d/synced", "durable", true)
	synced.Write([]byte("-tail"))
	write("/d/unsynced", "lost", false)
	if err := SyncDir(m, "/d"); err != nil {
		t.Fatal(err)
	}
	write("/d/new", "no dir sync", true)
	m.Rename("/d/synced", "/d/renamed")

	c := m.CrashClone(nil)
	names, _ := c.List("/d")
	if len(names) != 2 || names[0] != "synced" || names[1] != "unsynced" {
		t.Fatalf("after a crash the directory holds %v, want [synced unsynced]", names)
	}
	read := func(fs FS, name string) string {
		f, err := fs.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(f)
		return string(data)
	}
	if got := read(c, "/d/synced"); got != "durable" {
		t.Fatalf("synced file holds %q after a crash", got)
	}
	if got := read(c, "/d/unsynced"); got != "" {
		t.Fatalf("unsynced file holds %q after a crash", got)
	}
	SyncDir(m, "/d")
	c = m.CrashClone(rand.New(rand.NewPCG(1, 2)))
	names, _ = c.List("/d")
	if len(names) != 3 || names[0] != "new" || names[1] != "renamed" {
		t.Fatalf("after a directory sync: %v", names)
	}
	// The synced part survives, and of the unsynced tail a prefix.
	if got := read(c, "/d/renamed"); !strings.HasPrefix(got, "durable") || !strings.HasPrefix("durable-tail", got) {
		t.Fatalf("renamed file holds %q", got)
	}
}
