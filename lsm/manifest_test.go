package lsm

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// snapshotAndRotate takes and releases a snapshot and writes more than a
// memtable (so the writer rotates it), all of which take DB.mu, and fails
// the test if that does not end within 10 s while what is named holds on.
func snapshotAndRotate(t *testing.T, db *DB, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		db.NewSnapshot().Close()
		for i := range 400 {
			if err := db.Set(fmt.Appendf(nil, "k%04d", i), make([]byte, 100), &WriteOptions{}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("snapshots and a memtable rotation waited for %s", what)
	}
}

// TestManifestSyncLeavesTheDBMutexFree: while a flush's edit waits for
// the manifest's fsync, snapshots are taken and released and a writer
// rotates the memtable (all of which take DB.mu), and the edit's tables
// are not read before the edit is durable. A failed manifest fsync then
// installs nothing and stops writes.
func TestManifestSyncLeavesTheDBMutexFree(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			gate := vfs.NewSyncGate(vfs.NewMem(), "MANIFEST-", 0)
			opts := smallOptions()
			opts.MemTableStopWritesThreshold = 2 // the rotation must find room with the flush held
			opts.FS = gate
			opts.DisableBackgroundCompactions = true
			db := openTestDB(t, "/db", opts)
			defer db.Close()
			if err := db.Set([]byte("a"), []byte("1"), nil); err != nil {
				t.Fatal(err)
			}
			l0 := func() int {
				db.mu.Lock()
				defer db.mu.Unlock()
				return len(db.versions.current.levels[0])
			}
			before := l0()

			gate.Hold()
			released := false
			defer func() {
				if !released {
					gate.Release(nil)
				}
			}()
			flushed := make(chan error, 1)
			go func() { flushed <- db.Flush() }()
			<-gate.Entered()

			snapshotAndRotate(t, db, "the manifest's fsync")
			if got := l0(); got != before {
				t.Fatalf("L0 holds %d tables before the edit adding one is durable, %d before the flush", got, before)
			}

			var syncErr error
			if fail {
				syncErr = fmt.Errorf("injected manifest fsync failure")
			}
			released = true
			gate.Release(syncErr)
			err := <-flushed
			switch {
			case fail && err == nil:
				t.Fatal("Flush succeeded though the manifest's fsync failed")
			case fail:
				if got := l0(); got != before {
					t.Fatalf("L0 holds %d tables after the failed edit, %d before", got, before)
				}
				if err := db.Set([]byte("b"), []byte("2"), nil); err == nil {
					t.Fatal("a write succeeded after the manifest failed")
				}
			case err != nil:
				t.Fatal(err)
			default:
				if got := l0(); got <= before {
					t.Fatalf("L0 holds %d tables after the flush, %d before", got, before)
				}
			}
			if got := mustGet(t, db, "a"); got != "1" {
				t.Fatalf("a = %q", got)
			}
		})
	}
}

// removeGate holds the removal of files whose base name contains a
// pattern until released, and says when one is held.
type removeGate struct {
	vfs.FS
	pattern string
	entered chan struct{}
	release chan struct{}
}

func (g *removeGate) Remove(name string) error {
	if strings.Contains(filepath.Base(name), g.pattern) {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-g.release
	}
	return g.FS.Remove(name)
}

// TestManifestSwitchLeavesTheDBMutexFree: a flush's edit that starts a new
// manifest retires the old one (its close and unlink, which a busy journal
// can hold up) without DB.mu: snapshots are taken and a writer rotates the
// memtable meanwhile, the flush's table is already read, and Close waits
// for the retirement rather than racing it.
func TestManifestSwitchLeavesTheDBMutexFree(t *testing.T) {
	gate := &removeGate{FS: vfs.NewMem(), pattern: "MANIFEST-", entered: make(chan struct{}, 1), release: make(chan struct{})}
	opts := smallOptions()
	opts.MemTableStopWritesThreshold = 2 // the rotation must find room with the flush held
	opts.FS = gate
	opts.DisableBackgroundCompactions = true
	db := openTestDB(t, "/db", opts) // new: no manifest to retire
	released := false
	release := func() {
		if !released {
			released = true
			close(gate.release)
		}
	}
	defer release()
	setMaxManifestSize(db, 0)
	if err := db.Set([]byte("a"), []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- db.Flush() }()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the flush retired no manifest")
	}
	snapshotAndRotate(t, db, "the old manifest's unlink")
	db.mu.Lock()
	l0 := len(db.versions.current.levels[0])
	db.mu.Unlock()
	if l0 == 0 {
		t.Fatal("the flush's table is not in the current version while the old manifest is retired")
	}
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the old manifest was being retired", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-flushed; err != nil && !errors.Is(err, ErrClosed) {
		t.Fatal(err) // closed: Close ended the Flush's wait, its edit logged
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// TestEditRecordsTheSequenceNumberAfterItsWait: an edit that waits for
// another to be logged records the last sequence number as of its turn,
// not as of its call. The one it waited for may have added tables holding
// later sequence numbers; a new manifest's snapshot of them recording the
// earlier one made a reopened DB hide their newer entries (a crash-clone
// run caught acknowledged writes lost so).
func TestEditRecordsTheSequenceNumberAfterItsWait(t *testing.T) {
	for _, snapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("new-manifest=%v", snapshot), func(t *testing.T) {
			fs := vfs.NewMem()
			opts := smallOptions()
			opts.FS = fs
			opts.DisableBackgroundCompactions = true
			db := openTestDB(t, "/db", opts)
			defer db.Close()
			if snapshot {
				setMaxManifestSize(db, 0)
			}
			if err := db.Set([]byte("a"), []byte("1"), nil); err != nil {
				t.Fatal(err)
			}

			// Another edit is being logged: this one waits its turn.
			db.mu.Lock()
			db.versions.logging = true
			db.mu.Unlock()
			called := make(chan struct{})
			logged := make(chan error, 1)
			go func() {
				db.mu.Lock()
				close(called)
				err := db.versions.logAndApply(&versionEdit{})
				db.mu.Unlock()
				logged <- err
			}()
			<-called
			db.mu.Lock() // taken once the edit waits (which releases it)
			select {
			case err := <-logged:
				t.Fatalf("the edit was logged (%v) while another one was", err)
			default:
			}
			db.mu.Unlock()
			for i := range 50 {
				if err := db.Set(fmt.Appendf(nil, "k%02d", i), []byte("v"), nil); err != nil {
					t.Fatal(err)
				}
			}
			want := db.commit.logSeq.Load()
			db.mu.Lock()
			db.versions.logging = false
			db.versions.logged.Broadcast()
			db.mu.Unlock()
			if err := <-logged; err != nil {
				t.Fatal(err)
			}
			d, err := Describe("/db", fs)
			if err != nil {
				t.Fatal(err)
			}
			if d.LastSeq < want {
				t.Fatalf("the manifest records sequence number %d, the DB had assigned %d when the edit was logged", d.LastSeq, want)
			}
		})
	}
}
