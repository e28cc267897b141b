package vfs

import (
	"path/filepath"
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
