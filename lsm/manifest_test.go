package lsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

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

			done := make(chan error, 1)
			go func() {
				db.NewSnapshot().Close()
				// More than a memtable: the writer rotates it at least once.
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
				t.Fatal("snapshots and a memtable rotation waited for the manifest's fsync")
			}
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
