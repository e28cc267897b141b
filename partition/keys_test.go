package partition

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tabuladb/tabula/odata"
)

func TestEntityKeyOrderAndRoundTrip(t *testing.T) {
	strs := []string{"", "\x00", "\x00\x00", "\x00\x01", "\x00\xff", "\x01", "a", "a\x00", "a\x00b", "ab", "a\xff", "b", "\xff", "\xff\x00"}
	type tuple struct {
		acct   string
		id     uint64
		pk, rk string
	}
	var tuples []tuple
	for _, a := range []string{"", "a", "a\x00"} {
		for _, id := range []uint64{0, 1, 256, 1 << 40} {
			for _, pk := range strs {
				for _, rk := range strs[:6] {
					tuples = append(tuples, tuple{a, id, pk, rk})
				}
			}
		}
	}
	rand.Shuffle(len(tuples), func(i, j int) { tuples[i], tuples[j] = tuples[j], tuples[i] })
	cmpTuple := func(a, b tuple) int {
		return cmp.Or(cmp.Compare(a.acct, b.acct), cmp.Compare(a.id, b.id), cmp.Compare(a.pk, b.pk), cmp.Compare(a.rk, b.rk))
	}
	keys := make(map[tuple][]byte)
	for _, tp := range tuples {
		k := AppendEntityKey(nil, tp.acct, tp.id, tp.pk, tp.rk)
		keys[tp] = k
		d, err := DecodeEntityKey(k)
		if err != nil || d != (EntityKey{tp.acct, tp.id, tp.pk, tp.rk}) {
			t.Fatalf("decode %+v: %+v, %v", tp, d, err)
		}
		n := PrefixLen(k)
		if n == 0 || PrefixLen(k[:n]) != n {
			t.Fatalf("PrefixLen(%x) = %d, of prefix %d", k, n, PrefixLen(k[:n]))
		}
		if want := AppendEntityKey(nil, tp.acct, tp.id, tp.pk, ""); !bytes.HasPrefix(want, k[:n]) || len(want) != n+2 {
			t.Fatalf("prefix of %x is %x", k, k[:n])
		}
	}
	byKey := slices.Clone(tuples)
	slices.SortFunc(byKey, func(a, b tuple) int { return bytes.Compare(keys[a], keys[b]) })
	byTuple := slices.Clone(tuples)
	slices.SortFunc(byTuple, cmpTuple)
	if !slices.Equal(byKey, byTuple) {
		t.Fatal("key order differs from tuple order")
	}
}

func TestDecodeEntityKeyRejects(t *testing.T) {
	good := AppendEntityKey(nil, "acct", 7, "p", "r")
	for _, k := range [][]byte{
		nil, {nsCatalog}, good[:len(good)-1], append(slices.Clone(good), 'x'),
		{nsEntities, 'a', 0x00, 0x02}, {nsEntities, 'a', 0x00, 0x01, 1, 2},
	} {
		if _, err := DecodeEntityKey(k); err == nil {
			t.Errorf("DecodeEntityKey(%x) accepted", k)
		}
	}
	if PrefixLen([]byte{nsMeta, 1}) != 0 || PrefixLen(nil) != 0 || PrefixLen(good[:3]) != 0 {
		t.Error("PrefixLen of a non-entity key is not 0")
	}
}

func TestPositionKeys(t *testing.T) {
	tb := newTable("acct", "T", 9)
	key := func(pk, rk string) []byte { return AppendEntityKey(nil, "acct", 9, pk, rk) }
	pos := func(k odata.PositionKind, pk, rk string) odata.Position {
		return odata.Position{Kind: k, PartitionKey: pk, RowKey: rk}
	}
	for _, c := range []struct {
		p      odata.Position
		end    bool
		before []byte // a key that must sort before the position
		after  []byte // a key that must sort at or after it
	}{
		{pos(odata.BeforeKey, "p", "r"), false, key("p", "q\xff"), key("p", "r")},
		{pos(odata.AfterKey, "p", "r"), true, key("p", "r"), key("p", "r\x00")},
		{pos(odata.AfterPartition, "p", ""), true, key("p", "\xff\xff"), key("p\x00", "")},
		{pos(odata.Unbounded, "", ""), false, AppendEntityKey(nil, "acct", 8, "\xff", ""), key("", "")},
		{pos(odata.Unbounded, "", ""), true, key("\xff\xff", "\xff"), AppendEntityKey(nil, "acct", 10, "", "")},
	} {
		k := tb.positionKey(c.p, c.end)
		if bytes.Compare(c.before, k) >= 0 || bytes.Compare(k, c.after) > 0 {
			t.Errorf("%v: key %x not between %x and %x", c.p, k, c.before, c.after)
		}
	}
}
