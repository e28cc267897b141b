package partition

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tabuladb/tabula/odata"
)

// stampedLog is a replicated log's commands as a test writes them: each
// applies one write to a store under its stamp.
type stampedLog []func(ctx context.Context, s *Store) error

func (l stampedLog) applyAll(t *testing.T, s *Store, from uint64) {
	t.Helper()
	for i := from; i < uint64(len(l)); i++ {
		ctx := WithStamp(context.Background(), Stamp{Group: 1, Index: i + 1, Timestamp: odata.DateTime(1_000_000 + 1000*i)})
		// A command refused (a condition not met) is applied all the same:
		// it changes nothing, on every replica alike.
		if err := l[i](ctx, s); err != nil && ErrorCode(err) == "" {
			t.Fatalf("command %d: %v", i+1, err)
		}
	}
}

func testLog() stampedLog {
	var l stampedLog
	l = append(l, func(ctx context.Context, s *Store) error { _, err := s.CreateTable(ctx, acct, "Stamped"); return err })
	for i := range 20 {
		l = append(l, func(ctx context.Context, s *Store) error {
			_, err := s.Apply(ctx, acct, "stamped", Op{Kind: OpInsertOrMerge, Entity: ent("p", fmt.Sprintf("r%02d", i%7), "N", i)})
			return err
		})
	}
	l = append(l,
		func(ctx context.Context, s *Store) error {
			_, err := s.Apply(ctx, acct, "stamped", Op{Kind: OpInsert, Entity: ent("p", "r01")}) // exists: refused
			return err
		},
		func(ctx context.Context, s *Store) error {
			_, err := s.ExecuteBatch(ctx, acct, "stamped", []Op{
				{Kind: OpInsert, Entity: ent("q", "a", "V", 1)}, {Kind: OpInsert, Entity: ent("q", "b", "V", 2)}})
			return err
		},
		func(ctx context.Context, s *Store) error {
			return s.SetTableACL(ctx, acct, "stamped", []SignedIdentifier{{ID: "policy", Permission: "r"}})
		},
		func(ctx context.Context, s *Store) error {
			return s.SetServiceProperties(ctx, acct, []byte("<props/>"))
		},
		func(ctx context.Context, s *Store) error {
			return s.DeleteEntity(ctx, acct, "stamped", "p", "r03", "*")
		},
	)
	return l
}

// dump lists a store's entities with their timestamps, its ACL and its
// service properties.
func dump(t *testing.T, s *Store) string {
	t.Helper()
	ctx := context.Background()
	page, _, err := s.QueryEntitiesPage(ctx, acct, "stamped", EntityQuery{})
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for _, e := range page {
		out += fmt.Sprintf("%s/%s@%d %x\n", e.PartitionKey, e.RowKey, e.Timestamp, e.Value)
	}
	acl, err := s.GetTableACL(ctx, acct, "stamped")
	if err != nil {
		t.Fatal(err)
	}
	props, err := s.GetServiceProperties(ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	return out + fmt.Sprintf("acl %v props %s", acl, props)
}

// TestStampedWritesReplicate applies one log to two stores: they end
// byte for byte alike, timestamps included, each knows the index it
// applied, and a store that lost its unsynced tail to a crash, replaying
// the log from its applied index, ends alike too.
func TestStampedWritesReplicate(t *testing.T) {
	log := testLog()
	a, b := newEnv(t, nil), newEnv(t, nil)
	log.applyAll(t, a.s, 0)
	log.applyAll(t, b.s, 0)
	want := dump(t, a.s)
	if got := dump(t, b.s); got != want {
		t.Fatalf("replicas differ:\n%s\n---\n%s", want, got)
	}
	for _, e := range []*testEnv{a, b} {
		if idx, err := e.s.AppliedIndex(1); err != nil || idx != uint64(len(log)) {
			t.Fatalf("applied index %d, %v; want %d", idx, err, len(log))
		}
	}
	// The first entity's timestamp is the stamp's, not the wall clock's.
	batchAt := odata.DateTime(1_000_000 + 1000*22) // the batch is command 23
	if got, err := a.s.GetEntity(context.Background(), acct, "stamped", "q", "b"); err != nil || got.Timestamp != batchAt+1 {
		t.Fatalf("entity q/b, the batch's second: %v, timestamp %d, want %d", err, got.Timestamp, batchAt+1)
	}

	// A crash loses the unsynced stamped writes, all or a prefix of them,
	// and the applied index with them, never one without the other.
	c := newEnv(t, nil)
	log[:10].applyAll(t, c.s, 0)
	if err := c.s.SyncApplied(1, 10); err != nil {
		t.Fatal(err)
	}
	log.applyAll(t, c.s, 10)
	crashed := c.crashClone()
	crashed.open()
	defer crashed.s.Close()
	idx, err := crashed.s.AppliedIndex(1)
	if err != nil || idx < 10 {
		t.Fatalf("after the crash: applied index %d, %v; the synced 10 at least", idx, err)
	}
	log.applyAll(t, crashed.s, idx)
	if got := dump(t, crashed.s); got != want {
		t.Fatalf("the replayed replica differs:\n%s\n---\n%s", want, got)
	}
}

// TestStampBelowTheEntityIsRaised: a stamp at or before the timestamp of
// an entity it overwrites (a proposer that restarted, or whose clock is
// behind the last writer's) commits one past the entity's newest instead,
// the same on every replica, so the entity's ETag still only goes forward
// and no replica stops on it.
func TestStampBelowTheEntityIsRaised(t *testing.T) {
	// An hour ahead of the wall clock, so the store's clock is behind it.
	ahead := odata.DateTimeFromTime(time.Now().Add(time.Hour))
	var got [2]StoredEntity
	for i, e := range []*testEnv{newEnv(t, nil), newEnv(t, nil)} {
		ctx := WithStamp(context.Background(), Stamp{Group: 1, Index: 1})
		if _, err := e.s.CreateTable(ctx, acct, "stamped"); err != nil {
			t.Fatal(err)
		}
		ctx = WithStamp(context.Background(), Stamp{Group: 1, Index: 2, Timestamp: ahead})
		if _, err := e.s.Apply(ctx, acct, "stamped", Op{Kind: OpInsert, Entity: ent("p", "r")}); err != nil {
			t.Fatal(err)
		}
		for idx, ts := range []odata.DateTime{ahead, ahead - 1000} {
			ctx = WithStamp(context.Background(), Stamp{Group: 1, Index: uint64(3 + idx), Timestamp: ts})
			se, err := e.s.Apply(ctx, acct, "stamped", Op{Kind: OpInsertOrReplace, Entity: ent("p", "r")})
			if err != nil {
				t.Fatalf("replica %d: a stamp at or below the entity's timestamp: %v", i, err)
			}
			if want := ahead + 1 + odata.DateTime(idx); se.Timestamp != want {
				t.Fatalf("replica %d: committed at %d, want %d (one past the entity's newest)", i, se.Timestamp, want)
			}
			got[i] = se
		}
		// The store's own clock issues after the stamps it has seen.
		se, err := e.s.Apply(context.Background(), acct, "stamped", Op{Kind: OpInsert, Entity: ent("p", "s")})
		if err != nil || se.Timestamp <= ahead+1 {
			t.Fatalf("an unstamped write after stamps: %v, timestamp %d", err, se.Timestamp)
		}
	}
	if got[0].Timestamp != got[1].Timestamp {
		t.Fatalf("the replicas committed at %d and %d", got[0].Timestamp, got[1].Timestamp)
	}
}
