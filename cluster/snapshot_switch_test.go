package cluster

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// TestRestartAfterSnapshotSwitchOverDivergentTail: a node whose log holds
// a long tail that the group never committed (it led, cut off, and took
// writes) is sent a snapshot below the end of that tail. It switches its
// store to the snapshot and crashes before its raft log records the
// snapshot. Restarted, it must drop the tail as the lost write would
// have, and catch up from the leader's log: kept, the tail contradicts
// the snapshot's entry, which raft takes as committed, and the node
// stalls until a newer snapshot comes.
func TestRestartAfterSnapshotSwitchOverDivergentTail(t *testing.T) {
	c := newTestCluster(t, 3, 31)
	ctx := context.Background()
	old := c.leader(10 * time.Second)
	if _, err := old.node.Store().CreateTable(ctx, acct, "tail"); err != nil {
		t.Fatal(err)
	}
	write := func(s *Store, pk string, i int) error {
		_, err := s.Apply(ctx, acct, "tail", partition.Op{Kind: partition.OpInsertOrReplace, Entity: ent(pk, fmt.Sprintf("r%03d", i), i)})
		return err
	}
	for i := range 5 {
		if err := write(old.node.Store(), "before", i); err != nil {
			t.Fatal(err)
		}
	}
	c.converge(10 * time.Second)

	// The old leader, stalled and cut off, takes writes the group never
	// commits: a divergent tail of 150 entries.
	ld := c.stallAndCutOff(old)
	tailFrom, _ := old.logGroup(systemGroup).LastIndex()
	var wg sync.WaitGroup
	for i := range 150 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			write(old.node.Store(), "lost", i) // never acknowledged
		}()
	}
	wg.Wait()
	if last, _ := old.logGroup(systemGroup).LastIndex(); last < tailFrom+150 {
		t.Fatalf("the cut-off leader's log ends at %d, not past %d: the test lost its point", last, tailFrom+150)
	}
	// The others write fewer: the snapshot they send falls inside the tail.
	for i := range 100 {
		if err := write(ld.node.Store(), "after", i); err != nil {
			t.Fatal(err)
		}
	}
	if first, _ := ld.logGroup(systemGroup).FirstIndex(); first <= tailFrom+1 {
		t.Fatalf("the leader's log starts at %d: not compacted past the tail's start %d, the test lost its point", first, tailFrom+1)
	}
	c.stop(old.id)
	tailLog := readDir(t, old.fs, "/raft")

	// Restarted and healed, it catches up by a snapshot.
	c.net.heal()
	tn := c.start(old.id, old.fs)
	c.converge(20 * time.Second)
	if tn.node.Status().SnapshotsInstalled == 0 {
		t.Fatal("the node caught up without a snapshot: the test lost its point")
	}
	snapIndex := tn.node.storePtr.snap.GetIndex()
	if snapIndex > tailFrom+150 {
		t.Fatalf("the snapshot at %d is past the tail's end %d: the test lost its point", snapIndex, tailFrom+150)
	}
	c.stop(old.id)

	// The crash between the switch: the store is the snapshot's, the log
	// still the one with the tail.
	replaceDir(t, old.fs, "/raft", tailLog)
	tn = c.start(old.id, old.fs)
	for i := 100; i < 105; i++ {
		if err := write(c.leader(10*time.Second).node.Store(), "after", i); err != nil {
			t.Fatal(err)
		}
	}
	c.converge(10 * time.Second)
	want := dump(t, c.leader(10*time.Second).node.Replica(), "tail")
	if got := dump(t, tn.node.Replica(), "tail"); got != want {
		t.Fatalf("the restarted node differs:\n%s\n---\n%s", got, want)
	}
}

// readDir reads every file of dir.
func readDir(t *testing.T, fs vfs.FS, dir string) map[string][]byte {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, name := range names {
		f, err := fs.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// replaceDir makes dir hold exactly files, durably.
func replaceDir(t *testing.T, fs vfs.FS, dir string, files map[string][]byte) {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := fs.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range files {
		f, err := fs.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if err := vfs.SyncDir(fs, dir); err != nil {
		t.Fatal(err)
	}
}
