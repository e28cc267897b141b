package fuzz

import (
	"errors"
	"testing"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// FuzzCommand feeds arbitrary bytes to the decoder of replicated commands
// (docs/command.md): it must refuse with command.ErrCorrupt or decode to
// a command whose encoding decodes to the same command again.
func FuzzCommand(f *testing.F) {
	for _, c := range []command.Command{
		{Kind: command.KindApply, ID: 1<<48 | 1, Timestamp: 638_700_000_000_000_000, Account: "devstoreaccount1", Table: "t",
			Ops: []partition.Op{{Kind: partition.OpInsert, Entity: &odata.Entity{PartitionKey: "p", RowKey: "r",
				Properties: []odata.Property{{Name: "N", Value: odata.Int32Value(1)}, {Name: "S", Value: odata.StringValue("x")}}}}}},
		{Kind: command.KindBatch, Account: "a", Table: "t", Ops: []partition.Op{
			{Kind: partition.OpDelete, IfMatch: "*", Entity: &odata.Entity{PartitionKey: "p", RowKey: "1"}},
			{Kind: partition.OpMerge, IfMatch: "*", Entity: &odata.Entity{PartitionKey: "p", RowKey: "2"}}}},
		{Kind: command.KindCreateTable, Account: "a", Table: "t"},
		{Kind: command.KindSetACL, Account: "a", Table: "t", ACL: []partition.SignedIdentifier{{ID: "id", Permission: "r"}}},
		{Kind: command.KindSetProperties, Account: "a", Properties: []byte("<x/>")},
		{Kind: command.KindCreateRangeTable, Account: "a", Table: "t", Voters: []uint64{1, 2, 3}},
		{Kind: command.KindSetRangeVoters, Account: "a", Table: "t", Group: 9, Voters: []uint64{1, 2, 4}},
		{Kind: command.KindSplitRange, Account: "a", Table: "t", Group: 9, Key: "m"},
		{Kind: command.KindSplitGroup, Account: "a", Table: "t", Group: 12, Key: "m", Voters: []uint64{1, 2, 3}, Learners: []uint64{4 | 9<<32}},
		{Kind: command.KindNodeDown, Node: 3, Since: 1_700_000_000_000_000_000},
	} {
		f.Add(c.Append(nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := command.Decode(data)
		if err != nil {
			if !errors.Is(err, command.ErrCorrupt) {
				t.Fatalf("an error that is not ErrCorrupt: %v", err)
			}
			return
		}
		enc := c.Append(nil)
		again, err := command.Decode(enc)
		if err != nil {
			t.Fatalf("re-encoding %x does not decode: %v", enc, err)
		}
		if string(again.Append(nil)) != string(enc) {
			t.Fatalf("the encoding is not stable:\n%x\n%x", enc, again.Append(nil))
		}
	})
}
