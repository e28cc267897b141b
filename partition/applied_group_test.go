package partition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

func wantApplied(t *testing.T, s *Store, group, want uint64) {
	t.Helper()
	if got, err := s.AppliedIndex(group); err != nil || got != want {
		t.Fatalf("applied index of group %d: %d, %v; want %d", group, got, err, want)
	}
}

// TestAppliedIndexKeyLayout pins the key of a group's applied index
// (docs/keys.md): meta 06 and the group id, big-endian.
func TestAppliedIndexKeyLayout(t *testing.T) {
	got := groupMetaKey(metaGroupApplied, 0x0102030405060708)
	want := []byte{0x01, 0x06, 1, 2, 3, 4, 5, 6, 7, 8}
	if !bytes.Equal(got, want) {
		t.Fatalf("applied index key %x, want %x", got, want)
	}
}

// TestAppliedIndexPerGroup: stamped writes of two groups, interleaved,
// each record their own group's index and leave the other's alone;
// SyncApplied sets one group's; all of it survives a reopen.
func TestAppliedIndexPerGroup(t *testing.T) {
	e := newEnv(t, nil)
	for _, g := range []uint64{0, 1, 2, 1 << 40} {
		wantApplied(t, e.s, g, 0)
	}
	stamp := func(group, index uint64) context.Context {
		return WithStamp(context.Background(), Stamp{Group: group, Index: index, Timestamp: odata.DateTime(1_000_000 + index)})
	}
	if _, err := e.s.CreateTable(stamp(1, 1), acct, "one"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CreateTable(stamp(2, 1), acct, "two"); err != nil {
		t.Fatal(err)
	}
	// Group 1 writes at 2, 3, ...; group 2 at 10, 20, ...: interleaved.
	for i := uint64(0); i < 6; i++ {
		if _, err := e.s.Apply(stamp(1, 2+i), acct, "one", Op{Kind: OpInsertOrReplace, Entity: ent("p", fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
		wantApplied(t, e.s, 1, 2+i)
		if i > 0 {
			wantApplied(t, e.s, 2, 10*i)
		}
		if _, err := e.s.ExecuteBatch(stamp(2, 10*(i+1)), acct, "two", []Op{{Kind: OpInsertOrMerge, Entity: ent("q", fmt.Sprint(i))}}); err != nil {
			t.Fatal(err)
		}
		wantApplied(t, e.s, 2, 10*(i+1))
		wantApplied(t, e.s, 1, 2+i)
	}
	// A refused command records nothing; the group's next SyncApplied
	// carries its index.
	if _, err := e.s.Apply(stamp(1, 8), acct, "one", Op{Kind: OpInsert, Entity: ent("p", "0")}); ErrorCode(err) != CodeEntityAlreadyExists {
		t.Fatalf("insert of an existing entity: %v", err)
	}
	if err := e.s.SyncApplied(1, 8); err != nil {
		t.Fatal(err)
	}
	wantApplied(t, e.s, 1, 8)
	wantApplied(t, e.s, 2, 60)
	wantApplied(t, e.s, 3, 0)
	e.reopen()
	wantApplied(t, e.s, 1, 8)
	wantApplied(t, e.s, 2, 60)
	wantApplied(t, e.s, 3, 0)
	// Several groups' indexes in one write.
	if err := e.s.SyncAppliedIndexes(map[uint64]uint64{2: 61, 3: 4}); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	wantApplied(t, e.s, 1, 8)
	wantApplied(t, e.s, 2, 61)
	wantApplied(t, e.s, 3, 4)
}

// TestAppliedIndexLegacyKey: a store written before indexes were per group
// holds one index under meta 05; it reads as group 1's (the single group
// of a cluster then) until group 1 records its own, and group 1's first
// synced index drops it. Other groups never see it.
func TestAppliedIndexLegacyKey(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.s.db.Set(metaKey(metaApplied), appendUint64(nil, 41), e.s.syncWO); err != nil {
		t.Fatal(err)
	}
	e.reopen() // as the old code left it
	wantApplied(t, e.s, 1, 41)
	wantApplied(t, e.s, 2, 0)

	// A stamped write of group 1 supersedes the legacy key at once.
	ctx := WithStamp(context.Background(), Stamp{Group: 1, Index: 42})
	if _, err := e.s.CreateTable(ctx, acct, "legacy"); err != nil {
		t.Fatal(err)
	}
	wantApplied(t, e.s, 1, 42)
	if _, err := e.s.db.Get(metaKey(metaApplied)); err != nil {
		t.Fatalf("the legacy key went before a synced index: %v", err)
	}
	if err := e.s.SyncApplied(1, 43); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.db.Get(metaKey(metaApplied)); !errors.Is(err, lsm.ErrNotFound) {
		t.Fatalf("the legacy key is still there after group 1's SyncApplied: %v", err)
	}
	e.reopen()
	wantApplied(t, e.s, 1, 43)
	wantApplied(t, e.s, 2, 0)

	// A legacy value that is not 8 bytes is corruption, not 0.
	if err := e.s.db.Set(metaKey(metaApplied), []byte{1, 2, 3}, e.s.syncWO); err != nil {
		t.Fatal(err)
	}
	if err := e.s.db.Delete(groupMetaKey(metaGroupApplied, 1), e.s.syncWO); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.AppliedIndex(1); !errors.Is(err, lsm.ErrCorruption) {
		t.Fatalf("a 3-byte legacy index: %v, want corruption", err)
	}
}
