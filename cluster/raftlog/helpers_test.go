package raftlog

import (
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/vfs"
)

const testDir = "raftlog"

// testOptions are small options: a tiny memtable, so that the tests reach
// flushed sstables, and the given cache size.
func testOptions(fs vfs.FS, cacheEntries int) *Options {
	return &Options{FS: fs, CacheEntries: cacheEntries, MemTableSize: 16 << 10}
}

func mustOpen(t testing.TB, opts *Options) *Log {
	t.Helper()
	l, err := Open(testDir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func ent(index, term uint64, data []byte) *pb.Entry {
	return &pb.Entry{Index: proto.Uint64(index), Term: proto.Uint64(term), Type: pb.EntryNormal.Enum(), Data: data}
}

// gen makes random appends and hard states for a group whose log is
// first..last (first = FirstIndex).
type gen struct {
	rng  *rand.Rand
	term uint64
}

// entries returns 1 to 4 consecutive entries starting at or before
// last+1: usually right after last, sometimes overwriting a suffix
// (with a higher term, as raft would), sometimes reaching below first,
// never at or below commit.
func (g *gen) entries(first, last, commit uint64) []*pb.Entry {
	start := last + 1
	if g.rng.IntN(3) == 0 {
		lo := max(1, first-min(first, 2), commit+1)
		start = lo + g.rng.Uint64N(last+2-lo)
		g.term++
	}
	if g.term == 0 {
		g.term = 1
	}
	n := 1 + g.rng.IntN(4)
	ents := make([]*pb.Entry, n)
	for i := range ents {
		data := make([]byte, g.rng.IntN(60))
		for j := range data {
			data[j] = byte(g.rng.Uint32())
		}
		if len(data) == 0 && g.rng.IntN(2) == 0 {
			data = nil
		}
		ents[i] = ent(start+uint64(i), g.term, data)
	}
	return ents
}

// hardState returns a hard state committing at most last.
func (g *gen) hardState(last uint64) *pb.HardState {
	return &pb.HardState{Term: proto.Uint64(g.term), Vote: proto.Uint64(g.rng.Uint64N(4)), Commit: proto.Uint64(g.rng.Uint64N(last + 1))}
}

// mustGroup is Group for tests, whose logs load every group they hold.
func (l *Log) mustGroup(id uint64) *Storage {
	s, err := l.Group(id)
	if err != nil {
		panic(err)
	}
	return s
}
