package command

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// examples covers every kind, every Edm type and the edges of each field.
func examples() []Command {
	g := odata.Guid{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	rich := &odata.Entity{PartitionKey: "pk with ' and \x00", RowKey: "", Properties: []odata.Property{
		{Name: "S", Value: odata.StringValue("héllo")},
		{Name: "I32", Value: odata.Int32Value(math.MinInt32)},
		{Name: "I64", Value: odata.Int64Value(math.MaxInt64)},
		{Name: "NaN", Value: odata.DoubleValue(math.NaN())},
		{Name: "Inf", Value: odata.DoubleValue(math.Inf(-1))},
		{Name: "B", Value: odata.BoolValue(true)},
		{Name: "DT", Value: odata.DateTimeValue(odata.DateTime(638_000_000_000_000_001))},
		{Name: "G", Value: odata.GuidValue(g)},
		{Name: "Bin", Value: odata.BinaryValue([]byte{0, 255})},
	}}
	start := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	return []Command{
		{Kind: KindApply, ID: 1<<48 | 7, Timestamp: 638_700_000_000_000_000, Account: "devstoreaccount1", Table: "t",
			Ops: []partition.Op{{Kind: partition.OpMerge, IfMatch: `W/"datetime'2026-11-25T02%3A14%3A32.1234567Z'"`, Entity: rich}}},
		{Kind: KindApply, Account: "a", Table: "t", Ops: []partition.Op{{Kind: partition.OpDelete, IfMatch: "*", Entity: &odata.Entity{PartitionKey: "p", RowKey: "r"}}}},
		{Kind: KindBatch, ID: 3, Timestamp: 5, Account: "a", Table: "T", Ops: []partition.Op{
			{Kind: partition.OpInsert, Entity: &odata.Entity{PartitionKey: "p", RowKey: "1"}},
			{Kind: partition.OpInsertOrReplace, Entity: rich},
			{Kind: partition.OpUpdate, IfMatch: "*", Entity: &odata.Entity{PartitionKey: "p", RowKey: "3", Properties: []odata.Property{{Name: "X", Value: odata.StringValue("")}}}},
			// Encodings whose lengths take two and three bytes.
			{Kind: partition.OpInsert, Entity: &odata.Entity{PartitionKey: "p", RowKey: "4", Properties: []odata.Property{{Name: "L", Value: odata.StringValue(strings.Repeat("x", 200))}}}},
			{Kind: partition.OpInsert, Entity: &odata.Entity{PartitionKey: "p", RowKey: "5", Properties: []odata.Property{{Name: "L", Value: odata.BinaryValue(make([]byte, 20_000))}}}},
		}},
		{Kind: KindCreateTable, ID: 9, Account: "a", Table: "MixedCase"},
		{Kind: KindDeleteTable, Account: "a", Table: "mixedcase"},
		{Kind: KindSetACL, Account: "a", Table: "t", ACL: []partition.SignedIdentifier{
			{ID: "full", Start: start, Expiry: start.Add(time.Hour), Permission: "raud"},
			{ID: "open-ended", Permission: "r"},
		}},
		{Kind: KindSetACL, Account: "a", Table: "t", ACL: []partition.SignedIdentifier{}},
		{Kind: KindSetProperties, Account: "a", Properties: []byte("<StorageServiceProperties/>")},
		{Kind: KindCreateRangeTable, ID: 11, Account: "a", Table: "Ranged", Voters: []uint64{3, 1, 1 << 40}},
		{Kind: KindSetRangeVoters, ID: 12, Account: "a", Table: "Ranged", Group: 1 << 33, Voters: []uint64{4, 1}},
		{Kind: KindSplitRange, ID: 13, Account: "a", Table: "Ranged", Group: 7, Key: "m\x00"},
		{Kind: KindSplitGroup, ID: 14, Account: "a", Table: "Ranged", Group: 9, Key: "m", Voters: []uint64{1, 2, 3 | 40<<32}, Learners: []uint64{}},
		{Kind: KindMergeRange, ID: 16, Account: "a", Table: "Ranged", Group: 7, Key: "m"},
		{Kind: KindFreezeGroup, ID: 17, Account: "a", Table: "Ranged"},
		{Kind: KindMergeGroup, ID: 18, Account: "a", Table: "Ranged", Group: 9, Key: "m"},
		{Kind: KindSplitGroup, ID: 15, Account: "a", Table: "Ranged", Group: 9, Key: "m", Voters: []uint64{1}, Learners: []uint64{2 | 7<<32}},
		{Kind: KindNodeDown, ID: 19, Node: 4, Since: 1_700_000_000_123_456_789},
		{Kind: KindNodeDown, Node: 1 << 40},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, c := range examples() {
		enc := c.Append(nil)
		got, err := Decode(enc)
		if err != nil {
			t.Fatalf("%s: %v", c.Kind, err)
		}
		// Decoding fills what the encoding leaves implicit; compare re-encodings too.
		if again := got.Append(nil); string(again) != string(enc) {
			t.Errorf("%s: re-encoding differs:\n%x\n%x", c.Kind, enc, again)
		}
		if c.Kind == KindApply || c.Kind == KindBatch {
			for i := range c.Ops {
				want, have := c.Ops[i].Entity, got.Ops[i].Entity
				if want.PartitionKey != have.PartitionKey || want.RowKey != have.RowKey || len(want.Properties) != len(have.Properties) {
					t.Errorf("%s op %d: entity %+v, want %+v", c.Kind, i, have, want)
				}
				for j := range want.Properties {
					w, h := want.Properties[j], have.Properties[j]
					if w.Name != h.Name || w.Value.Type() != h.Value.Type() || odata.AppendEncoded(nil, 0, []odata.Property{w}) == nil ||
						string(odata.AppendEncoded(nil, 0, []odata.Property{w})) != string(odata.AppendEncoded(nil, 0, []odata.Property{h})) {
						t.Errorf("%s op %d property %s: %+v, want %+v", c.Kind, i, w.Name, h, w)
					}
				}
				if c.Ops[i].Kind != got.Ops[i].Kind || c.Ops[i].IfMatch != got.Ops[i].IfMatch {
					t.Errorf("%s op %d: %v %q, want %v %q", c.Kind, i, got.Ops[i].Kind, got.Ops[i].IfMatch, c.Ops[i].Kind, c.Ops[i].IfMatch)
				}
			}
			got.Ops, c.Ops = nil, nil
		}
		if len(c.ACL) == 0 && len(got.ACL) == 0 {
			got.ACL, c.ACL = nil, nil
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("%s: decoded %+v, want %+v", c.Kind, got, c)
		}
	}
}

func TestSetTimestamp(t *testing.T) {
	c := examples()[0]
	enc := c.Append(nil)
	SetTimestamp(enc, 42)
	got, err := Decode(enc)
	if err != nil || got.Timestamp != 42 {
		t.Fatalf("after SetTimestamp: %v, timestamp %d", err, got.Timestamp)
	}
}

// TestDecodeRefusesDamage cuts and corrupts every example: each prefix,
// each single-byte change that leaves it undecodable, and trailing bytes
// are refused with ErrCorrupt, never a panic.
func TestDecodeRefusesDamage(t *testing.T) {
	for _, c := range examples() {
		enc := c.Append(nil)
		for n := range len(enc) {
			if _, err := Decode(enc[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s cut to %d of %d bytes: %v", c.Kind, n, len(enc), err)
			}
		}
		if _, err := Decode(append(enc[:len(enc):len(enc)], 0)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s with a trailing byte: %v", c.Kind, err)
		}
		for i := range enc {
			bad := append([]byte(nil), enc...)
			bad[i] ^= 0xff
			if _, err := Decode(bad); err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%s with byte %d flipped: %v", c.Kind, i, err)
			}
		}
	}
	for _, bad := range [][]byte{nil, {2, 1}, {1, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%x: %v", bad, err)
		}
	}
	// A move of the system group's voters, or of none, or to node 0.
	head := []byte{1, byte(KindSetRangeVoters), 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'a', 1, 't'}
	for name, tail := range map[string][]byte{
		"system group": {1, 1, 2}, "group 0": {0, 1, 2}, "no voters": {5, 0}, "node 0": {5, 2, 1, 0},
		"eight voters": {5, 8, 1, 2, 3, 4, 5, 6, 7, 8},
	} {
		if _, err := Decode(append(append([]byte(nil), head...), tail...)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("set-range-voters, %s: %v", name, err)
		}
	}
	splitHead := []byte{1, byte(KindSplitRange), 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'a', 1, 't'}
	for name, tail := range map[string][]byte{"system group": {1, 1, 'm'}, "empty key": {5, 0}, "cut key": {5, 3, 'm'}} {
		if _, err := Decode(append(append([]byte(nil), splitHead...), tail...)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("split-range, %s: %v", name, err)
		}
	}
	if c, err := Decode(append(append([]byte(nil), head...), 5, 2, 1, 4)); err != nil || c.Group != 5 || len(c.Voters) != 2 {
		t.Errorf("a valid set-range-voters: %+v, %v", c, err)
	}
	// A batch claiming more operations than its bytes could hold.
	huge := (&Command{Kind: KindBatch, Account: "a", Table: "t", Ops: []partition.Op{{Entity: &odata.Entity{}}}}).Append(nil)
	const countAt = 2 + 8 + 1 + 2 + 2 // version, kind, timestamp, ID 0, account "a", table "t"
	if huge[countAt] != 1 {
		t.Fatalf("the op count is not at %d: %x", countAt, huge)
	}
	huge[countAt] = 100
	if _, err := Decode(huge); !errors.Is(err, ErrCorrupt) {
		t.Errorf("an inflated count: %v", err)
	}
}
