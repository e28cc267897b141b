package raftlog

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/vfs"
)

// TestCrashSynced checks the two promises of Commit on a power loss: a
// synced Write is there after a crash exactly, and an unsynced Write that
// the crash dropped is wholly absent.
func TestCrashSynced(t *testing.T) {
	fs := vfs.NewMem()
	l := mustOpen(t, testOptions(fs, 0))
	groups := []uint64{1, 2}
	w := l.NewWrite()
	for _, g := range groups {
		w.Append(g, []*pb.Entry{ent(1, 1, []byte("a")), ent(2, 1, []byte("b"))})
		w.SetHardState(g, &pb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(g), Commit: proto.Uint64(1)})
	}
	if err := w.Commit(true); err != nil {
		t.Fatal(err)
	}
	synced := dumpAll(t, l, groups)
	// An unsynced Write across both groups, overwriting a suffix.
	w = l.NewWrite()
	for _, g := range groups {
		w.Append(g, []*pb.Entry{ent(2, 2, []byte("c")), ent(3, 2, []byte("d"))})
		w.SetHardState(g, &pb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(0), Commit: proto.Uint64(2)})
	}
	if err := w.Commit(false); err != nil {
		t.Fatal(err)
	}
	unsynced := dumpAll(t, l, groups)
	// A crash that keeps nothing unsynced.
	c := mustOpen(t, testOptions(fs.CrashClone(nil), 0))
	if got := dumpAll(t, c, groups); got != synced {
		t.Fatalf("after a crash:\n%s\nwant the synced state:\n%s", got, synced)
	}
	c.Close()
	// A synced Write makes the unsynced one before it durable too.
	w = l.NewWrite()
	w.SetHardState(1, &pb.HardState{Term: proto.Uint64(2), Vote: proto.Uint64(1), Commit: proto.Uint64(3)})
	if err := w.Commit(true); err != nil {
		t.Fatal(err)
	}
	last := dumpAll(t, l, groups)
	if last == unsynced {
		t.Fatal("the last write changed nothing")
	}
	c = mustOpen(t, testOptions(fs.CrashClone(nil), 0))
	if got := dumpAll(t, c, groups); got != last {
		t.Fatalf("after a crash:\n%s\nwant the synced state:\n%s", got, last)
	}
	c.Close()
	l.Close()
}

// TestCrashClones runs random Writes over three groups (appends that
// overwrite suffixes, hard states; synced or not) and Compacts, and at
// random moments opens a crash clone of the filesystem, with unsynced
// tails dropped or torn at random: the Log it opens must hold exactly the
// state after some prefix of the operations, no shorter than the last
// synced Write, so that no synced Write is lost and no Write is partly
// there.
func TestCrashClones(t *testing.T) {
	clones := 0
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		fs := vfs.NewMem()
		opts := testOptions(fs, 3)
		l := mustOpen(t, opts)
		groups := []uint64{3, 4, 5}
		gens := map[uint64]*gen{}
		for _, g := range groups {
			gens[g] = &gen{rng: rng}
		}
		states := []string{dumpAll(t, l, groups)}
		durable := 0
		for step := range 80 {
			sync := false
			if rng.IntN(6) == 0 {
				g := l.mustGroup(groups[rng.IntN(len(groups))])
				fi, _ := g.FirstIndex()
				li, _ := g.LastIndex()
				hs, _, _ := g.InitialState()
				if c := min(li, hs.GetCommit()); c >= fi {
					if err := g.Compact(fi + rng.Uint64N(c+1-fi)); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				w := l.NewWrite()
				skip := rng.IntN(len(groups) + 1) // at most one group is left out
				for k, id := range groups {
					if k == skip {
						continue
					}
					g := l.mustGroup(id)
					fi, _ := g.FirstIndex()
					li, _ := g.LastIndex()
					hs, _, _ := g.InitialState()
					ents := gens[id].entries(fi, li, hs.GetCommit())
					w.Append(id, ents)
					if rng.IntN(2) == 0 {
						last := ents[len(ents)-1].GetIndex()
						nhs := gens[id].hardState(last)
						if nhs.GetCommit() < hs.GetCommit() {
							nhs.Commit = hs.Commit
						}
						w.SetHardState(id, nhs)
					}
				}
				sync = rng.IntN(3) == 0
				if err := w.Commit(sync); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
			}
			states = append(states, dumpAll(t, l, groups))
			if sync {
				durable = len(states) - 1
			}
			if rng.IntN(4) != 0 {
				continue
			}
			clones++
			c := mustOpen(t, testOptions(fs.CrashClone(rng), 3))
			got := dumpAll(t, c, groups)
			c.Close()
			match := -1
			for k := len(states) - 1; k >= durable && match < 0; k-- {
				if states[k] == got {
					match = k
				}
			}
			if match < 0 {
				for k := range states {
					if states[k] == got {
						t.Logf("matches state %d", k)
					}
				}
				t.Fatalf("seed %d step %d: a crash clone holds\n%s\nwhich is none of the states since the last synced write (%d of %d); the last:\n%s", seed, step, got, durable, len(states)-1, states[len(states)-1])
			}
		}
		l.Close()
	}
	t.Logf("%d crash clones opened", clones)
}

// dump describes everything raft can read of a group, for comparisons.
func dump(s raft.Storage) (string, error) {
	var b strings.Builder
	fi, err := s.FirstIndex()
	if err != nil {
		return "", err
	}
	li, err := s.LastIndex()
	if err != nil {
		return "", err
	}
	t, err := s.Term(fi - 1)
	if err != nil {
		return "", fmt.Errorf("Term(%d): %w", fi-1, err)
	}
	hs, cs, err := s.InitialState()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "first %d last %d term(first-1) %d hs %v cs %v\n", fi, li, t, hs, cs)
	if li >= fi {
		ents, err := s.Entries(fi, li+1, ^uint64(0))
		if err != nil {
			return "", fmt.Errorf("Entries(%d, %d): %w", fi, li+1, err)
		}
		for _, e := range ents {
			fmt.Fprintf(&b, "%d/%d/%x\n", e.GetIndex(), e.GetTerm(), e.GetData())
		}
	}
	return b.String(), nil
}

// dumpAll dumps groups of l.
func dumpAll(t testing.TB, l *Log, groups []uint64) string {
	t.Helper()
	var b strings.Builder
	for _, g := range groups {
		d, err := dump(l.mustGroup(g))
		if err != nil {
			t.Fatalf("group %d: %v", g, err)
		}
		fmt.Fprintf(&b, "group %d: %s", g, d)
	}
	return b.String()
}
