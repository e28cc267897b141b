package partition

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/odata"
)

// The upsert/update matrix of the service (reference §2, Azurite#1565),
// plus the other If-Match rules.
func TestWriteConditions(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("cond")
	s := e.s
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		exists   bool
		kind     OpKind
		ifMatch  string // "etag" is the entity's current ETag, "stale" an old one
		wantCode string
	}{
		{"new insert", false, OpInsert, "", ""},
		{"existing insert", true, OpInsert, "", CodeEntityAlreadyExists},
		{"new PATCH no If-Match", false, OpInsertOrMerge, "", ""},
		{"new PATCH If-Match *", false, OpMerge, "*", CodeResourceNotFound},
		{"new upsert-merge with If-Match *", false, OpInsertOrMerge, "*", CodeResourceNotFound},
		{"new PUT no If-Match", false, OpInsertOrReplace, "", ""},
		{"new PUT If-Match *", false, OpUpdate, "*", CodeResourceNotFound},
		{"new upsert-replace with If-Match *", false, OpInsertOrReplace, "*", CodeResourceNotFound},
		{"new DELETE *", false, OpDelete, "*", CodeResourceNotFound},
		{"existing PATCH etag", true, OpMerge, "etag", ""},
		{"existing PATCH *", true, OpMerge, "*", ""},
		{"existing PUT etag", true, OpUpdate, "etag", ""},
		{"existing PUT *", true, OpUpdate, "*", ""},
		{"existing upsert-replace etag", true, OpInsertOrReplace, "etag", ""},
		{"existing PATCH stale", true, OpMerge, "stale", CodeUpdateConditionNotSatisfied},
		{"existing PUT stale", true, OpUpdate, "stale", CodeUpdateConditionNotSatisfied},
		{"existing upsert-merge stale", true, OpInsertOrMerge, "stale", CodeUpdateConditionNotSatisfied},
		{"existing PUT garbage", true, OpUpdate, `"abc"`, CodeUpdateConditionNotSatisfied},
		{"existing DELETE etag", true, OpDelete, "etag", ""},
		{"existing DELETE *", true, OpDelete, "*", ""},
		{"existing DELETE stale", true, OpDelete, "stale", CodeUpdateConditionNotSatisfied},
		{"existing PUT no If-Match", true, OpUpdate, "", CodeUpdateConditionNotSatisfied},
		{"existing MERGE no If-Match", true, OpMerge, "", CodeUpdateConditionNotSatisfied},
		{"existing DELETE no If-Match", true, OpDelete, "", CodeUpdateConditionNotSatisfied},
		{"existing upsert-merge", true, OpInsertOrMerge, "", ""},
		{"existing upsert-replace", true, OpInsertOrReplace, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			pk, rk := "p", strings.ReplaceAll(c.name, " ", "_")
			var etag, stale string
			if c.exists {
				stale = mustApply(t, s, "cond", Op{Kind: OpInsert, Entity: ent(pk, rk, "A", 1)}).ETag()
				etag = mustApply(t, s, "cond", Op{Kind: OpUpdate, Entity: ent(pk, rk, "A", 2), IfMatch: stale}).ETag()
			}
			ifMatch := c.ifMatch
			switch ifMatch {
			case "etag":
				ifMatch = etag
			case "stale":
				ifMatch = stale
			}
			r, err := s.Apply(ctx, acct, "cond", Op{Kind: c.kind, Entity: ent(pk, rk, "B", 3), IfMatch: ifMatch})
			wantCode(t, c.name, err, c.wantCode)
			got, gerr := s.GetEntity(ctx, acct, "cond", pk, rk)
			switch {
			case err != nil && c.exists:
				if gerr != nil || got.ETag() != etag {
					t.Fatalf("failed write changed the entity: %v %v", got.ETag(), gerr)
				}
			case err != nil:
				wantCode(t, "get after failed write", gerr, CodeResourceNotFound)
			case c.kind == OpDelete:
				wantCode(t, "get after delete", gerr, CodeResourceNotFound)
			default:
				if gerr != nil || got.ETag() != r.ETag() || got.Timestamp != r.Timestamp {
					t.Fatalf("get after write: %+v %v, wrote %+v", got, gerr, r)
				}
			}
		})
	}
}

func TestReplaceAndMerge(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("props")
	s := e.s
	ctx := context.Background()
	mustApply(t, s, "props", Op{Kind: OpInsert, Entity: ent("p", "r", "A", 1, "B", "b", "C", true)})
	mustApply(t, s, "props", Op{Kind: OpMerge, Entity: ent("p", "r", "B", "B2", "D", 4.5), IfMatch: "*"})
	check := func(what string, want map[string]odata.Value) {
		t.Helper()
		got, err := s.GetEntity(ctx, acct, "props", "p", "r")
		if err != nil {
			t.Fatal(err)
		}
		ge, err := got.Entity()
		if err != nil {
			t.Fatal(err)
		}
		if ge.PartitionKey != "p" || ge.RowKey != "r" || ge.Timestamp != got.Timestamp {
			t.Fatalf("%s: decoded %+v", what, ge)
		}
		m := props(ge)
		if len(m) != len(want) {
			t.Fatalf("%s: properties %v, want %v", what, m, want)
		}
		for k, v := range want {
			if !m[k].Identical(v) {
				t.Fatalf("%s: %s = %v, want %v", what, k, m[k], v)
			}
		}
	}
	check("merge", map[string]odata.Value{"A": odata.Int32Value(1), "B": odata.StringValue("B2"), "C": odata.BoolValue(true), "D": odata.DoubleValue(4.5)})
	mustApply(t, s, "props", Op{Kind: OpInsertOrMerge, Entity: ent("p", "r", "E", int64(5))})
	check("upsert merge", map[string]odata.Value{"A": odata.Int32Value(1), "B": odata.StringValue("B2"), "C": odata.BoolValue(true), "D": odata.DoubleValue(4.5), "E": odata.Int64Value(5)})
	mustApply(t, s, "props", Op{Kind: OpUpdate, Entity: ent("p", "r", "Z", "z"), IfMatch: "*"})
	check("replace", map[string]odata.Value{"Z": odata.StringValue("z")})
	mustApply(t, s, "props", Op{Kind: OpInsertOrReplace, Entity: ent("p", "r")})
	check("upsert replace", map[string]odata.Value{})
}

func TestEntityLimits(t *testing.T) {
	e := newEnv(t, nil)
	e.createTable("limits")
	s := e.s
	ctx := context.Background()
	many := func(n int) *odata.Entity {
		x := ent("p", fmt.Sprint("many", n))
		for i := range n {
			x.Properties = append(x.Properties, odata.Property{Name: fmt.Sprintf("P%03d", i), Value: odata.Int32Value(int32(i))})
		}
		return x
	}
	big := func(rk string, n int) *odata.Entity { return ent("p", rk, "S", strings.Repeat("x", n)) }
	bin := func(rk string, n int) *odata.Entity { return ent("p", rk, "B", odata.BinaryValue(make([]byte, n))) }
	huge := func(rk string, props int) *odata.Entity {
		x := ent("p", rk)
		for i := range props {
			x.Properties = append(x.Properties, odata.Property{Name: fmt.Sprint("B", i), Value: odata.BinaryValue(make([]byte, 65536))})
		}
		return x
	}
	for _, c := range []struct {
		name string
		e    *odata.Entity
		code string
	}{
		{"252 properties", many(252), ""},
		{"253 properties", many(253), odata.CodeTooManyProperties},
		{"string of 32768 chars (64 KiB)", big("s1", 32768), ""},
		{"string of 32769 chars", big("s2", 32769), odata.CodePropertyValueTooLarge},
		{"binary of 64 KiB", bin("b1", 65536), ""},
		{"binary of 64 KiB + 1", bin("b2", 65537), odata.CodePropertyValueTooLarge},
		{"entity under 1 MiB", huge("h1", 15), ""},
		{"entity over 1 MiB", huge("h2", 16), odata.CodeEntityTooLarge},
		{"PartitionKey of 1024 chars", ent(strings.Repeat("k", 1024), "r"), ""},
		{"PartitionKey of 1025 chars", ent(strings.Repeat("k", 1025), "r"), odata.CodeKeyValueTooLarge},
		{"RowKey of 1025 chars", ent("p", strings.Repeat("k", 1025)), odata.CodeKeyValueTooLarge},
		{"empty keys", ent("", ""), ""},
		{"slash in PartitionKey", ent("a/b", "r"), odata.CodeOutOfRangeInput},
		{"backslash in RowKey", ent("p", `a\b`), odata.CodeOutOfRangeInput},
		{"hash in RowKey", ent("p", "a#b"), odata.CodeOutOfRangeInput},
		{"question mark in RowKey", ent("p", "a?b"), odata.CodeOutOfRangeInput},
		{"control char U+0001", ent("p", "a\x01b"), odata.CodeOutOfRangeInput},
		{"control char U+007F", ent("p", "a\x7fb"), odata.CodeOutOfRangeInput},
		{"control char U+0085", ent("p", "a\u0085b"), odata.CodeOutOfRangeInput},
		{"NUL", ent("p\x00", "r"), odata.CodeOutOfRangeInput},
		{"duplicate property", ent("p", "dup", "A", 1, "A", 2), odata.CodeDuplicatePropertiesSpecified},
		{"bad property name", ent("p", "bad", "1A", 1), odata.CodePropertyNameInvalid},
		{"system property name", ent("p", "sys", "Timestamp", 1), odata.CodePropertyNameInvalid},
	} {
		_, err := s.InsertEntity(ctx, acct, "limits", c.e)
		wantCode(t, c.name, err, c.code)
	}
	// A merge can grow an entity past the limits.
	mustApply(t, s, "limits", Op{Kind: OpInsert, Entity: many(200)})
	grow := ent("p", "many200")
	for i := range 53 {
		grow.Properties = append(grow.Properties, odata.Property{Name: fmt.Sprint("New", i), Value: odata.BoolValue(true)})
	}
	_, err := s.MergeEntity(ctx, acct, "limits", grow, "*")
	wantCode(t, "merge past 252 properties", err, odata.CodeTooManyProperties)
	mustApply(t, s, "limits", Op{Kind: OpInsert, Entity: huge("h3", 10)})
	_, err = s.InsertOrMergeEntity(ctx, acct, "limits", huge("h3", 6))
	wantCode(t, "merge within the size limit (same names)", err, "")
	more := huge("h3", 0)
	for i := range 6 {
		more.Properties = append(more.Properties, odata.Property{Name: fmt.Sprint("C", i), Value: odata.BinaryValue(make([]byte, 65536))})
	}
	_, err = s.InsertOrMergeEntity(ctx, acct, "limits", more)
	wantCode(t, "merge past 1 MiB", err, odata.CodeEntityTooLarge)
	wantCode(t, "delete with a bad key", s.DeleteEntity(ctx, acct, "limits", "a/b", "r", "*"), odata.CodeOutOfRangeInput)
	_, err = s.Apply(ctx, acct, "limits", Op{Kind: 99, Entity: ent("p", "r")})
	wantCode(t, "unknown kind", err, CodeInvalidInput)
	_, err = s.Apply(ctx, acct, "limits", Op{Kind: OpInsert})
	wantCode(t, "no entity", err, CodeInvalidInput)
}

// Timestamps are strictly increasing even when the wall clock stands still
// or goes back, also across a restart, and ETags follow them.
func TestClockAndETags(t *testing.T) {
	fixed := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	now := fixed
	e := newEnv(t, &Options{Now: func() time.Time { return now }})
	e.createTable("clock")
	ctx := context.Background()
	var last odata.DateTime
	check := func(r StoredEntity) {
		t.Helper()
		if r.Timestamp <= last {
			t.Fatalf("timestamp %v not after %v", r.Timestamp, last)
		}
		if r.ETag() != odata.ETag(r.Timestamp) {
			t.Fatalf("ETag %s for %v", r.ETag(), r.Timestamp)
		}
		last = r.Timestamp
	}
	r := mustApply(t, e.s, "clock", Op{Kind: OpInsert, Entity: ent("p", "r")})
	if r.Timestamp != odata.DateTimeFromTime(fixed) {
		t.Fatalf("first timestamp %v, want the clock's %v", r.Timestamp, fixed)
	}
	check(r)
	for range 5 {
		check(mustApply(t, e.s, "clock", Op{Kind: OpInsertOrReplace, Entity: ent("p", "r")}))
	}
	res, err := e.s.ExecuteBatch(ctx, acct, "clock", []Op{{Kind: OpInsert, Entity: ent("p", "a")}, {Kind: OpInsert, Entity: ent("p", "b")}})
	if err != nil {
		t.Fatal(err)
	}
	check(res[0])
	check(res[1])
	now = fixed.Add(-time.Hour) // the wall clock steps back
	check(mustApply(t, e.s, "clock", Op{Kind: OpInsertOrReplace, Entity: ent("q", "r")}))
	e.reopen()
	check(mustApply(t, e.s, "clock", Op{Kind: OpInsertOrReplace, Entity: ent("q", "r")}))

	// An If-Match in other spellings of the same ETag matches.
	cur, _ := e.s.GetEntity(ctx, acct, "clock", "q", "r")
	plain := `W/"datetime'` + cur.Timestamp.String() + `'"`
	check(mustApply(t, e.s, "clock", Op{Kind: OpUpdate, Entity: ent("q", "r"), IfMatch: plain}))
	_, err = e.s.UpdateEntity(ctx, acct, "clock", ent("q", "r"), plain)
	wantCode(t, "stale spelled differently", err, CodeUpdateConditionNotSatisfied)
}
