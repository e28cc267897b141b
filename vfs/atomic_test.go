package vfs

import (
	"math/rand/v2"
	"testing"
)

// TestWriteFileAtomic checks that a replaced file survives a power loss
// (its data and its name are synced), and that a replacement that fails
// leaves the old content and no temporary file.
func TestWriteFileAtomic(t *testing.T) {
	m := NewMem()
	if err := m.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(m, "/"); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(m, "/d/F", []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(m, "/d/F", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, m.CrashClone(rand.New(rand.NewPCG(1, 1))), "/d/F"); got != "new" {
		t.Fatalf("after a power loss F holds %q, want %q", got, "new")
	}

	e := NewErrorFS(m, 1)
	e.Inject(Fault{Op: OpRename, Match: "/d/F"})
	if err := WriteFileAtomic(e, "/d/F", []byte("lost")); err == nil {
		t.Fatal("a failed rename was not reported")
	}
	if got := readAll(t, m, "/d/F"); got != "new" {
		t.Fatalf("after a failed replacement F holds %q", got)
	}
	if names, _ := m.List("/d"); len(names) != 1 {
		t.Fatalf("the directory holds %v, want F alone", names)
	}
}
