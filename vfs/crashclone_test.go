package vfs

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func readAll(t *testing.T, fs FS, name string) string {
	t.Helper()
	f, err := fs.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, _ := io.ReadAll(f)
	return string(data)
}

func TestCrashClone(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/d", 0o700)
	SyncDir(m, "/")
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
	if fmt.Sprint(names) != "[synced unsynced]" {
		t.Fatalf("after a crash the directory holds %v, want [synced unsynced]", names)
	}
	if got := readAll(t, c, "/d/synced"); got != "durable" {
		t.Fatalf("synced file holds %q after a crash", got)
	}
	if got := readAll(t, c, "/d/unsynced"); got != "" {
		t.Fatalf("unsynced file holds %q after a crash", got)
	}
	SyncDir(m, "/d")
	c = m.CrashClone(rand.New(rand.NewPCG(1, 2)))
	names, _ = c.List("/d")
	if fmt.Sprint(names) != "[new renamed unsynced]" {
		t.Fatalf("after a directory sync: %v", names)
	}
	// The synced part survives, and of the unsynced tail a prefix.
	if got := readAll(t, c, "/d/renamed"); !strings.HasPrefix(got, "durable") || !strings.HasPrefix("durable-tail", got) {
		t.Fatalf("renamed file holds %q", got)
	}
}

// TestCrashCloneReuse: a reused file's writes survive a crash as far as
// they were synced, past them its old content; with a random source, a
// prefix of the unsynced writes too. Until its directory is synced, the
// crash keeps the file under its old name, holding what the new writes
// made of it (one inode).
func TestCrashCloneReuse(t *testing.T) {
	m := NewMem()
	SyncDir(m, "/")
	f, _ := m.Create("/old")
	f.Write([]byte("0123456789"))
	f.Sync()
	SyncDir(m, "/")
	r, err := m.Reuse("/old", "/new")
	if err != nil {
		t.Fatal(err)
	}
	r.Write([]byte("ab"))
	r.Sync()
	r.Write([]byte("cd"))
	if got := readAll(t, m, "/new"); got != "abcd456789" {
		t.Fatalf("reused file reads %q", got)
	}
	c := m.CrashClone(nil)
	if names, _ := c.List("/"); fmt.Sprint(names) != "[old]" {
		t.Fatalf("before the directory sync a crash leaves %v, want [old]", names)
	}
	if got := readAll(t, c, "/old"); got != "ab23456789" {
		t.Fatalf("after a crash the file holds %q, want the synced writes over its old content", got)
	}
	SyncDir(m, "/")
	for seed := range uint64(20) {
		got := readAll(t, m.CrashClone(rand.New(rand.NewPCG(seed, 3))), "/new")
		if got != "ab23456789" && got != "abc3456789" && got != "abcd456789" {
			t.Fatalf("seed %d: after a crash the file holds %q", seed, got)
		}
	}
}

// TestCrashCloneRemoveAndReplace: a removed name and a replaced one come
// back until the directory is synced.
func TestCrashCloneRemoveAndReplace(t *testing.T) {
	m := NewMem()
	for _, name := range []string{"/CURRENT", "/old", "/CURRENT.tmp"} {
		f, _ := m.Create(name)
		f.Write([]byte(name))
		f.Sync()
	}
	SyncDir(m, "/")
	m.Remove("/old")
	m.Rename("/CURRENT.tmp", "/CURRENT")
	c := m.CrashClone(nil)
	if got := readAll(t, c, "/CURRENT"); got != "/CURRENT" {
		t.Fatalf("an unsynced rename took effect: CURRENT holds %q", got)
	}
	if names, _ := c.List("/"); fmt.Sprint(names) != "[CURRENT CURRENT.tmp old]" {
		t.Fatalf("names before the directory sync: %v", names)
	}
	SyncDir(m, "/")
	c = m.CrashClone(nil)
	if got := readAll(t, c, "/CURRENT"); got != "/CURRENT.tmp" {
		t.Fatalf("after the directory sync CURRENT holds %q", got)
	}
	if names, _ := c.List("/"); fmt.Sprint(names) != "[CURRENT]" {
		t.Fatalf("names after the directory sync: %v", names)
	}
	// Writing to the clone leaves the original alone.
	f, _ := c.Create("/x")
	f.Write([]byte("clone"))
	if _, err := m.Stat("/x"); err == nil {
		t.Fatal("a file created in the clone appeared in the original")
	}
}

// TestCrashCloneDirectories: a new directory, and everything in it, is
// lost unless its parent was synced after it was made.
func TestCrashCloneDirectories(t *testing.T) {
	m := NewMem()
	m.MkdirAll("/a/b", 0o700)
	f, _ := m.Create("/a/b/f")
	f.Write([]byte("x"))
	f.Sync()
	SyncDir(m, "/a/b")
	if _, err := m.CrashClone(nil).List("/a/b"); err == nil {
		t.Fatal("a directory whose parents were never synced survived")
	}
	SyncDir(m, "/a")
	if _, err := m.CrashClone(nil).List("/a/b"); err == nil {
		t.Fatal("a directory survived though its parent /a is not durable")
	}
	SyncDir(m, "/")
	c := m.CrashClone(nil)
	if got := readAll(t, c, "/a/b/f"); got != "x" {
		t.Fatalf("file in durable directories holds %q", got)
	}
	// Relative paths hang off ".", which always survives.
	m.MkdirAll("rel", 0o700)
	g, _ := m.Create("rel/g")
	g.Sync()
	SyncDir(m, "rel")
	if _, err := m.CrashClone(nil).Stat("rel/g"); err == nil {
		t.Fatal("rel survived without a sync of .")
	}
	SyncDir(m, ".")
	if _, err := m.CrashClone(nil).Stat("rel/g"); err != nil {
		t.Fatalf("rel/g after syncing .: %v", err)
	}
}

// TestCrashCloneTornTailsAreSeeded: with a random source each file keeps a
// prefix of its unsynced tail, over the whole range of lengths, and the
// same seed gives the same clone.
func TestCrashCloneTornTailsAreSeeded(t *testing.T) {
	m := NewMem()
	for i := range 8 {
		f, _ := m.Create(fmt.Sprintf("/f%d", i))
		f.Write([]byte("synced|"))
		f.Sync()
		f.Write([]byte("0123456789"))
	}
	SyncDir(m, "/")
	clone := func(seed uint64) string {
		c := m.CrashClone(rand.New(rand.NewPCG(seed, 0)))
		var b strings.Builder
		for i := range 8 {
			got := readAll(t, c, fmt.Sprintf("/f%d", i))
			if !strings.HasPrefix(got, "synced|") || !strings.HasPrefix("synced|0123456789", got) {
				t.Fatalf("file %d holds %q", i, got)
			}
			fmt.Fprintf(&b, "%d ", len(got))
		}
		return b.String()
	}
	if a, b := clone(5), clone(5); a != b {
		t.Fatalf("seed 5 gave lengths %s then %s", a, b)
	}
	lengths := map[string]bool{}
	for seed := range uint64(50) {
		for _, n := range strings.Fields(clone(seed)) {
			lengths[n] = true
		}
	}
	if !lengths["7"] || !lengths["17"] || len(lengths) < 8 {
		t.Fatalf("torn tails cover lengths %v of 7..17", lengths)
	}
}

// TestCrashCloneWhileWriting takes clones while writers append and sync:
// every clone holds, of each file, at least what was synced before the
// clone began, and only data that was written.
func TestCrashCloneWhileWriting(t *testing.T) {
	m := NewMem()
	const writers, records = 4, 300
	files := make([]File, writers)
	for i := range files {
		files[i], _ = m.Create(fmt.Sprintf("/w%d", i))
	}
	SyncDir(m, "/")
	var synced [writers]int // records synced, guarded by mu
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range records {
				f.Write(fmt.Appendf(nil, "%04d;", r))
				if r%3 == 0 {
					f.Sync()
					mu.Lock()
					synced[i] = r + 1
					mu.Unlock()
				}
			}
		}()
	}
	for range 50 {
		mu.Lock()
		before := synced
		mu.Unlock()
		c := m.CrashClone(rand.New(rand.NewPCG(uint64(before[0]), 1)))
		for i := range writers {
			got := readAll(t, c, fmt.Sprintf("/w%d", i))
			if len(got) < 5*before[i] {
				t.Fatalf("file %d: %d bytes survived, %d records were synced", i, len(got), before[i])
			}
			for r := 0; r+5 <= len(got); r += 5 {
				if got[r:r+5] != fmt.Sprintf("%04d;", r/5) {
					t.Fatalf("file %d holds %q at %d", i, got[r:r+5], r)
				}
			}
		}
	}
	wg.Wait()
}
