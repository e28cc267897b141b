package partition

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tabuladb/tabula/odata"
)

func TestBatch(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("batch")
	s := e.s
	ctx := context.Background()
	seed := mustApply(t, s, "batch", Op{Kind: OpInsert, Entity: ent("p", "existing", "V", 1)})
	mustApply(t, s, "batch", Op{Kind: OpInsert, Entity: ent("p", "doomed")})

	inserts := func(n int, pk string) []Op {
		ops := make([]Op, n)
		for i := range ops {
			ops[i] = Op{Kind: OpInsert, Entity: ent(pk, fmt.Sprintf("n%03d", i))}
		}
		return ops
	}
	withOp := func(ops []Op, i int, op Op) []Op { ops[i] = op; return ops }
	big := func(rk string) Op {
		x := ent("p", rk)
		for i := range 15 {
			x.Properties = append(x.Properties, odata.Property{Name: fmt.Sprint("B", i), Value: odata.BinaryValue(make([]byte, 65536))})
		}
		return Op{Kind: OpInsert, Entity: x}
	}
	for _, c := range []struct {
		name  string
		ops   []Op
		index int
		code  string
	}{
		{"101 operations", inserts(101, "p"), 100, CodeInvalidInput},
		{"mixed partitions", withOp(inserts(10, "p"), 7, Op{Kind: OpInsert, Entity: ent("q", "x")}), 7, CodeCommandsInBatchActOnDifferentPartitions},
		{"duplicate row", withOp(inserts(10, "p"), 5, Op{Kind: OpInsertOrMerge, Entity: ent("p", "n002")}), 5, CodeInvalidDuplicateRow},
		{"invalid entity", withOp(inserts(10, "p"), 3, Op{Kind: OpInsert, Entity: ent("p", "a/b")}), 3, odata.CodeOutOfRangeInput},
		{"insert of existing in the middle", withOp(inserts(10, "p"), 4, Op{Kind: OpInsert, Entity: ent("p", "existing")}), 4, CodeEntityAlreadyExists},
		{"stale If-Match in the middle", withOp(inserts(10, "p"), 6, Op{Kind: OpUpdate, Entity: ent("p", "existing"), IfMatch: `W/"datetime'2000-01-01T00%3A00%3A00.0000000Z'"`}), 6, CodeUpdateConditionNotSatisfied},
		{"delete of missing last", withOp(inserts(10, "p"), 9, Op{Kind: OpDelete, Entity: ent("p", "missing"), IfMatch: "*"}), 9, CodeResourceNotFound},
		{"over 4 MiB", []Op{big("b0"), big("b1"), big("b2"), big("b3"), big("b4"), big("b5")}, 5, CodeRequestBodyTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Let the batch also delete and update things, to see them survive.
			if len(c.ops) > 2 && c.index > 1 {
				c.ops[0] = Op{Kind: OpDelete, Entity: ent("p", "doomed"), IfMatch: "*"}
			}
			_, err := s.ExecuteBatch(ctx, acct, "batch", c.ops)
			var be *BatchError
			if !errors.As(err, &be) || be.Index != c.index || ErrorCode(err) != c.code {
				t.Fatalf("error %v, want BatchError at %d with %s", err, c.index, c.code)
			}
			page, _, err := s.QueryEntitiesPage(ctx, acct, "batch", EntityQuery{})
			if err != nil || len(page) != 2 {
				t.Fatalf("after a failed batch: %d entities, %v", len(page), err)
			}
			if page[1].RowKey != "existing" || page[1].ETag() != seed.ETag() {
				t.Fatalf("existing entity changed: %+v", page[1])
			}
		})
	}

	// 100 operations of every kind succeed together, in order.
	ops := inserts(100, "p")
	ops[0] = Op{Kind: OpMerge, Entity: ent("p", "existing", "W", 2), IfMatch: seed.ETag()}
	ops[1] = Op{Kind: OpDelete, Entity: ent("p", "doomed"), IfMatch: "*"}
	ops[2] = Op{Kind: OpInsertOrReplace, Entity: ent("p", "upsert")}
	res, err := s.ExecuteBatch(ctx, acct, "batch", ops)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 100 || res[1].ETag() != "" || res[1].RowKey != "doomed" || res[0].ETag() == seed.ETag() {
		t.Fatalf("results: %d, %+v %+v", len(res), res[0], res[1])
	}
	for i := 1; i < len(res); i++ {
		if res[i].ETag() != "" && res[i].Timestamp <= res[0].Timestamp {
			t.Fatalf("result %d timestamp %v not after %v", i, res[i].Timestamp, res[0].Timestamp)
		}
	}
	got, _ := s.GetEntity(ctx, acct, "batch", "p", "existing")
	ge, _ := got.Entity()
	if m := props(ge); len(m) != 2 || got.ETag() != res[0].ETag() {
		t.Fatalf("merged entity %v %s", m, got.ETag())
	}
	_, err = s.GetEntity(ctx, acct, "batch", "p", "doomed")
	wantCode(t, "deleted by batch", err, CodeResourceNotFound)
	page, _, _ := s.QueryEntitiesPage(ctx, acct, "batch", EntityQuery{Filter: "PartitionKey eq 'p'"})
	if len(page) != 99 {
		t.Fatalf("%d entities after the batch, want 99", len(page))
	}
	r, _ := s.Ranges(ctx, acct, "batch")
	if r[0].Entities != 99 {
		t.Fatalf("range counts %d entities", r[0].Entities)
	}

	if res, err := s.ExecuteBatch(ctx, acct, "batch", nil); err != nil || len(res) != 0 {
		t.Fatalf("empty batch: %v %v", res, err)
	}
	_, err = s.ExecuteBatch(ctx, acct, "nothere", ops)
	var be *BatchError
	if !errors.As(err, &be) || be.Index != 0 || ErrorCode(err) != CodeTableNotFound {
		t.Fatalf("missing table: %v", err)
	}
	if !strings.Contains(be.Error(), "0") {
		t.Fatalf("message %q", be.Error())
	}
}
