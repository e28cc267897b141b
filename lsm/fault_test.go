package lsm

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabuladb/tabula/vfs"
)

// faultKey is the key of acknowledged write i of a fault test.
func faultKey(i int) []byte { return fmt.Appendf(nil, "key%05d", i) }

func faultValue(i int) []byte { return fmt.Appendf(nil, "value-%05d-%s", i, strings.Repeat("v", 40)) }

// TestInjectedWriteErrors injects a write or sync error into each kind of
// file the engine writes, then checks the contract: the failing operation
// (or, for background work, the next write) reports it; from then on
// every write fails with the same sticky error, so nothing is
// acknowledged that could not be persisted; reads keep working; and once
// the disk is healthy the store reopens with every acknowledged write.
func TestInjectedWriteErrors(t *testing.T) {
	type trigger int
	const (
		bySyncedWrite trigger = iota
		byFlush
		byCompaction
	)
	for _, c := range []struct {
		name  string
		fault vfs.Fault
		by    trigger
	}{
		{"WAL write EIO", vfs.Fault{Op: vfs.OpWrite, Match: ".log"}, bySyncedWrite},
		{"WAL short write ENOSPC", vfs.Fault{Op: vfs.OpWrite, Match: ".log", Err: syscall.ENOSPC, Short: true}, bySyncedWrite},
		{"WAL fsync", vfs.Fault{Op: vfs.OpSync, Match: ".log"}, bySyncedWrite},
		{"WAL fsync, sticky", vfs.Fault{Op: vfs.OpSync, Match: ".log", Sticky: true}, bySyncedWrite},
		{"sstable create in flush", vfs.Fault{Op: vfs.OpCreate, Match: ".sst"}, byFlush},
		{"sstable write in flush", vfs.Fault{Op: vfs.OpWrite, Match: ".sst"}, byFlush},
		{"sstable short write in flush", vfs.Fault{Op: vfs.OpWrite, Match: ".sst", Err: syscall.ENOSPC, Short: true}, byFlush},
		{"sstable fsync in flush", vfs.Fault{Op: vfs.OpSync, Match: ".sst"}, byFlush},
		{"directory fsync in flush", vfs.Fault{Op: vfs.OpSyncDir}, byFlush},
		{"MANIFEST write in flush", vfs.Fault{Op: vfs.OpWrite, Match: "MANIFEST"}, byFlush},
		{"MANIFEST fsync in flush", vfs.Fault{Op: vfs.OpSync, Match: "MANIFEST"}, byFlush},
		{"new WAL segment in flush", vfs.Fault{Op: vfs.OpCreate, Match: ".log"}, byFlush},
		{"sstable write in compaction", vfs.Fault{Op: vfs.OpWrite, Match: ".sst"}, byCompaction},
		{"sstable fsync in compaction", vfs.Fault{Op: vfs.OpSync, Match: ".sst"}, byCompaction},
		{"MANIFEST fsync in compaction", vfs.Fault{Op: vfs.OpSync, Match: "MANIFEST"}, byCompaction},
	} {
		t.Run(c.name, func(t *testing.T) {
			efs := vfs.NewErrorFS(vfs.NewMem(), 1)
			opts := smallOptions()
			opts.FS = efs
			opts.DisableBackgroundCompactions = c.by == byCompaction
			db, err := Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			acked := 0
			write := func() error {
				err := db.Set(faultKey(acked), faultValue(acked), nil)
				if err == nil {
					acked++
				}
				return err
			}
			for range 300 {
				if err := write(); err != nil {
					t.Fatal(err)
				}
			}
			if c.by == byCompaction {
				// Two overlapping L0 tables: compacting them writes a table.
				if err := db.Flush(); err != nil {
					t.Fatal(err)
				}
				for i := range 50 {
					if err := db.Set(faultKey(i), faultValue(i), nil); err != nil {
						t.Fatal(err)
					}
				}
				if err := db.Flush(); err != nil {
					t.Fatal(err)
				}
			}

			efs.Inject(c.fault)
			var failure error
			switch c.by {
			case bySyncedWrite:
				failure = write()
			case byFlush:
				failure = db.Flush()
			case byCompaction:
				failure = db.Compact(nil, nil)
			}
			if failure == nil {
				t.Fatal("the operation that hit the fault succeeded")
			}
			if n, _ := efs.Injected(); n == 0 {
				t.Fatal("the fault never fired")
			}
			// Background failures surface on the next write at the latest.
			if err := write(); err == nil {
				t.Fatalf("a write after %v was acknowledged", failure)
			} else if !errors.Is(err, failure) && err.Error() != failure.Error() {
				t.Logf("first error %v, then %v", failure, err)
			}
			deadline := time.Now().Add(200 * time.Millisecond)
			for time.Now().Before(deadline) {
				if err := write(); err == nil {
					t.Fatal("writes were accepted again after a failure")
				}
			}
			for _, i := range []int{0, acked / 2, acked - 1} {
				if v, err := db.Get(faultKey(i)); err != nil || string(v) != string(faultValue(i)) {
					t.Fatalf("read of acknowledged key %d after the failure: %q, %v", i, v, err)
				}
			}
			db.Close() // may report the failure again

			efs.Disarm()
			db, err = Open("/db", opts)
			if err != nil {
				t.Fatalf("reopen on a healthy disk: %v", err)
			}
			defer db.Close()
			for i := range acked {
				if v, err := db.Get(faultKey(i)); err != nil || string(v) != string(faultValue(i)) {
					t.Fatalf("acknowledged key %d after reopening: %q, %v", i, v, err)
				}
			}
			if err := write(); err != nil {
				t.Fatalf("a write after reopening: %v", err)
			}
		})
	}
}

// TestInjectedOpenErrors fails Open at each step that writes: it reports
// the error, and a later Open on a healthy disk finds every write.
func TestInjectedOpenErrors(t *testing.T) {
	for _, f := range []vfs.Fault{
		{Op: vfs.OpRename, Match: "CURRENT"},
		{Op: vfs.OpSync, Match: "MANIFEST"},
		{Op: vfs.OpCreate, Match: "MANIFEST"},
		{Op: vfs.OpCreate, Match: ".log"},
		{Op: vfs.OpSyncDir},
		{Op: vfs.OpRead, Match: ".log"},
		{Op: vfs.OpOpen, Match: "MANIFEST"},
	} {
		t.Run(f.Op.String()+" "+f.Match, func(t *testing.T) {
			efs := vfs.NewErrorFS(vfs.NewMem(), 1)
			opts := smallOptions()
			opts.FS = efs
			db, err := Open("/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 100 {
				if err := db.Set(faultKey(i), faultValue(i), nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			efs.Inject(f)
			if db, err := Open("/db", opts); err == nil {
				db.Close()
				t.Fatalf("Open succeeded (faults fired: %d)", func() int { n, _ := efs.Injected(); return n }())
			}
			efs.Disarm()
			db, err = Open("/db", opts)
			if err != nil {
				t.Fatalf("reopen on a healthy disk: %v", err)
			}
			defer db.Close()
			for i := range 100 {
				if v, err := db.Get(faultKey(i)); err != nil || string(v) != string(faultValue(i)) {
					t.Fatalf("key %d: %q, %v", i, v, err)
				}
			}
		})
	}
}
