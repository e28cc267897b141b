package fuzz

import (
	"bytes"
	"cmp"
	"testing"

	"github.com/tabuladb/tabula/partition"
)

// FuzzContinuationToken decodes arbitrary NextPartitionKey, NextRowKey and
// NextTableName values: each is rejected with InvalidInput or decodes to
// keys whose tokens are exactly the input. Encoding the inputs as keys and
// decoding the tokens gives them back.
func FuzzContinuationToken(f *testing.F) {
	c := partition.NewContinuation("pk", "rk")
	f.Add(c.NextPartitionKey, c.NextRowKey, partition.EncodeNextTableName("mytable"))
	f.Add(c.NextPartitionKey, "", "")
	f.Add("", c.NextRowKey, "garbage")
	f.Add("AQ", "AQAAAAA", "AXRhYmxl")
	f.Fuzz(func(t *testing.T, nextPK, nextRK, nextTable string) {
		in := partition.Continuation{NextPartitionKey: nextPK, NextRowKey: nextRK}
		if !in.IsZero() {
			pk, rk, err := in.Position()
			if err != nil {
				if partition.ErrorCode(err) != partition.CodeInvalidInput {
					t.Fatalf("Position error %v is not InvalidInput", err)
				}
			} else {
				out := partition.NewContinuation(pk, rk)
				if out.NextPartitionKey != nextPK || (nextRK != "" && out.NextRowKey != nextRK) {
					t.Fatalf("tokens %+v decode to (%q, %q), which encode to %+v", in, pk, rk, out)
				}
				if nextRK == "" && rk != "" {
					t.Fatalf("partition-only token decoded a RowKey %q", rk)
				}
			}
		}
		if name, err := partition.DecodeNextTableName(nextTable); err != nil {
			if partition.ErrorCode(err) != partition.CodeInvalidInput {
				t.Fatalf("DecodeNextTableName error %v is not InvalidInput", err)
			}
		} else if again := partition.EncodeNextTableName(name); again != nextTable {
			t.Fatalf("table token %q decodes to %q, which encodes to %q", nextTable, name, again)
		}

		// The inputs as keys: tokens made from them decode back.
		pk, rk, err := partition.NewContinuation(nextPK, nextRK).Position()
		if err != nil || pk != nextPK || rk != nextRK {
			t.Fatalf("(%q, %q) round-trips to (%q, %q), %v", nextPK, nextRK, pk, rk, err)
		}
		if name, err := partition.DecodeNextTableName(partition.EncodeNextTableName(nextTable)); err != nil || name != nextTable {
			t.Fatalf("table name %q round-trips to %q, %v", nextTable, name, err)
		}
	})
}

// FuzzClusteredKey encodes arbitrary (account, table id, PartitionKey,
// RowKey) tuples: keys decode back, compare as the tuples do, and have a
// partition prefix that lsm's Split contract accepts. Arbitrary bytes
// either fail to decode or are a key that re-encodes to themselves.
func FuzzClusteredKey(f *testing.F) {
	f.Add("acct", uint64(1), "pk", "rk", "acct", uint64(1), "pk", "rk2")
	f.Add("", uint64(0), "", "", "\x00", uint64(0), "", "")
	f.Add("a\x00b", uint64(1<<40), "p\x00", "\xff", "a", uint64(2), "p", "\x00\x01")
	f.Fuzz(func(t *testing.T, a1 string, id1 uint64, pk1, rk1, a2 string, id2 uint64, pk2, rk2 string) {
		k1 := partition.AppendEntityKey(nil, a1, id1, pk1, rk1)
		k2 := partition.AppendEntityKey(nil, a2, id2, pk2, rk2)
		for _, c := range []struct {
			k    []byte
			want partition.EntityKey
		}{{k1, partition.EntityKey{Account: a1, TableID: id1, PartitionKey: pk1, RowKey: rk1}}, {k2, partition.EntityKey{Account: a2, TableID: id2, PartitionKey: pk2, RowKey: rk2}}} {
			got, err := partition.DecodeEntityKey(c.k)
			if err != nil || got != c.want {
				t.Fatalf("%+v encodes to %x, which decodes to %+v, %v", c.want, c.k, got, err)
			}
			n := partition.PrefixLen(c.k)
			if n <= 0 || n > len(c.k) || partition.PrefixLen(c.k[:n]) != n {
				t.Fatalf("PrefixLen(%x) = %d; of the prefix %d", c.k, n, partition.PrefixLen(c.k[:min(max(n, 0), len(c.k))]))
			}
			if !bytes.Equal(c.k[:n], partition.AppendEntityKey(nil, c.want.Account, c.want.TableID, c.want.PartitionKey, "")[:n]) {
				t.Fatalf("prefix of %x depends on the RowKey", c.k)
			}
		}
		want := cmp.Or(cmp.Compare(a1, a2), cmp.Compare(id1, id2), cmp.Compare(pk1, pk2), cmp.Compare(rk1, rk2))
		if got := bytes.Compare(k1, k2); got != want {
			t.Fatalf("keys compare %d, tuples %d: %x vs %x", got, want, k1, k2)
		}
		// Arbitrary bytes: the fuzzer's strings glued together.
		raw := append([]byte{0x10}, a1+pk1+rk1...)
		if k, err := partition.DecodeEntityKey(raw); err == nil {
			if again := partition.AppendEntityKey(nil, k.Account, k.TableID, k.PartitionKey, k.RowKey); !bytes.Equal(again, raw) {
				t.Fatalf("%x decodes to %+v, which encodes to %x", raw, k, again)
			}
		}
		if n := partition.PrefixLen(raw); n < 0 || n > len(raw) || partition.PrefixLen(raw[:n]) != n {
			t.Fatalf("PrefixLen of raw %x = %d", raw, n)
		}
	})
}
