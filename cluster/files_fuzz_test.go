package cluster

import (
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"
)

// FuzzMembers feeds garbage to the MEMBERS decoder (docs/cluster-files.md):
// no input panics, and what it accepts encodes into a file that decodes
// to the same book.
func FuzzMembers(f *testing.F) {
	f.Add([]byte("1 127.0.0.1:7001\n2 127.0.0.1:7002\nhighest 5\nremoved 4\nremoved 5\n"))
	f.Add([]byte("1 127.0.0.1:7001\n2 127.0.0.1:7002\ndraining 2\n"))
	f.Add([]byte("draining 07\n"))
	f.Add([]byte("1 a b c\n"))
	f.Add([]byte("highest 0\n"))
	f.Add([]byte("removed x\n"))
	f.Add([]byte("\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := decodeMembers(raw)
		if err != nil {
			return
		}
		again, err := decodeMembers(encodeMembers(b))
		if err != nil {
			t.Fatalf("the encoding of an accepted book is refused: %v", err)
		}
		if !maps.Equal(b.addrs, again.addrs) || !maps.Equal(b.removed, again.removed) || !maps.Equal(b.draining, again.draining) || b.highest != again.highest {
			t.Fatalf("book %+v reads back as %+v", b, again)
		}
		for id := range b.addrs {
			if id == 0 || id > b.highest {
				t.Fatalf("member %d accepted with highest %d", id, b.highest)
			}
		}
	})
}

// FuzzStorePointer feeds garbage to the STORE decoder: no input panics,
// and what it accepts encodes into a file that decodes alike.
func FuzzStorePointer(f *testing.F) {
	f.Add([]byte("tabula-store 1\ndir 1\n"))
	f.Add([]byte("tabula-store 1\ndir 3\nsnapshot 120 4 0a0101\n"))
	f.Add([]byte("tabula-store 1\ndir 0\n"))
	f.Add([]byte("tabula-store 2\ndir 1\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := decodeStorePointer(raw)
		if err != nil {
			return
		}
		if p.n < 1 {
			t.Fatalf("store directory %d accepted", p.n)
		}
		enc, err := p.encode()
		if err != nil {
			t.Fatalf("an accepted pointer does not encode: %v", err)
		}
		again, err := decodeStorePointer(enc)
		if err != nil {
			t.Fatalf("the encoding of an accepted pointer is refused: %v", err)
		}
		if again.n != p.n || (again.snap == nil) != (p.snap == nil) || (p.snap != nil && !proto.Equal(again.snap, p.snap)) {
			t.Fatalf("pointer %+v reads back as %+v", p, again)
		}
	})
}

// FuzzSpanRecord feeds garbage to the SPANSNAP-<group> decoder: no input
// panics, and what it accepts encodes into a file that decodes alike.
func FuzzSpanRecord(f *testing.F) {
	f.Add([]byte("tabula-span-snapshot 1\ngroup 7\nsnapshot 151 3 0a03010203\n"))
	f.Add([]byte("tabula-span-snapshot 1\ngroup 7\nsnapshot 151 3\n"))
	f.Add([]byte("tabula-span-snapshot 1\ngroup 1\nsnapshot 1 1\n"))
	f.Add([]byte("tabula-span-snapshot 2\ngroup 7\nsnapshot 1 1\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		g, meta, err := decodeSpanRecord(raw)
		if err != nil {
			return
		}
		if g <= systemGroup {
			t.Fatalf("group %d accepted", g)
		}
		enc, err := encodeSpanRecord(g, meta)
		if err != nil {
			t.Fatalf("an accepted record does not encode: %v", err)
		}
		g2, meta2, err := decodeSpanRecord(enc)
		if err != nil || g2 != g || !proto.Equal(meta, meta2) {
			t.Fatalf("record %d %v reads back as %d %v (%v)", g, meta, g2, meta2, err)
		}
	})
}

// FuzzUnloadedRecord feeds garbage to the decoder of the unloaded records
// (docs/raftlog.md): no input panics, and what it accepts encodes into a
// value that decodes to the same record.
func FuzzUnloadedRecord(f *testing.F) {
	f.Add(unloadedReplica{leader: 3, applied: 120, lastStamp: 1 << 40, appliedTS: -1, dormantLeader: true, moving: true}.encode())
	f.Add(unloadedReplica{applied: 7, cold: true}.encode())
	f.Add([]byte{1, 0, 0, 0, 0, 64})
	f.Add([]byte{2, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0x80})
	f.Fuzz(func(t *testing.T, raw []byte) {
		u, err := decodeUnloaded(raw)
		if err != nil {
			return
		}
		again, err := decodeUnloaded(u.encode())
		if err != nil || again != u {
			t.Fatalf("record %+v reads back as %+v (%v)", u, again, err)
		}
	})
}

// FuzzIdentity feeds garbage to the CLUSTER reader: no input panics, and
// an identity it accepts names a node and is written back alike.
func FuzzIdentity(f *testing.F) {
	f.Add([]byte("cluster 0123456789abcdef0123456789abcdef\nnode 2\n"))
	f.Add([]byte("cluster c\nnode 3\nremoved\n"))
	f.Add([]byte("cluster \nnode 0\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		id, ok := parseIdentity(raw)
		if !ok {
			return
		}
		if id.Node == 0 {
			t.Fatal("node 0 accepted")
		}
		again, ok := parseIdentity(id.encode())
		if !ok || again != id {
			t.Fatalf("identity %+v reads back as %+v (%v)", id, again, ok)
		}
	})
}
