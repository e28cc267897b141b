package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/vfs"
)

// Membership changes are raft configuration changes, one at a time: a
// new node joins as a learner (it takes the log or a snapshot but does
// not vote), the leader promotes it to a voter once it has caught up, and
// a node leaves by being removed. The change's entry carries the node's
// internal address, so every member learns where the new one is; each
// node keeps the address book in its data directory (MEMBERS), and a
// snapshot carries it to a node that missed the entries.

// membersFile holds a node's address book: "id address" per line.
const membersFile = "MEMBERS"

// ErrRemoved is what Run returns on a node that the cluster removed.
var ErrRemoved = errors.New("cluster: this node was removed from the cluster")

// members is the address book: every member's internal address.
type members struct {
	mu    sync.Mutex
	addrs map[uint64]string
}

func (m *members) get(id uint64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addrs[id]
}

// Members returns the node's address book: every member's internal
// address by id.
func (n *Node) Members() map[uint64]string { return n.members.all() }

func (m *members) all() map[uint64]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[uint64]string, len(m.addrs))
	for k, v := range m.addrs {
		out[k] = v
	}
	return out
}

// encodeMembers is the address book as MEMBERS and snapshots hold it.
func encodeMembers(addrs map[uint64]string) []byte {
	var b bytes.Buffer
	for _, id := range slices.Sorted(maps.Keys(addrs)) {
		fmt.Fprintf(&b, "%d %s\n", id, addrs[id])
	}
	return b.Bytes()
}

func decodeMembers(b []byte) (map[uint64]string, error) {
	out := map[uint64]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		idText, addr, ok := strings.Cut(sc.Text(), " ")
		id, err := strconv.ParseUint(idText, 10, 64)
		if !ok || err != nil || id == 0 || addr == "" {
			return nil, fmt.Errorf("cluster: a bad member line %q", sc.Text())
		}
		out[id] = addr
	}
	return out, sc.Err()
}

// loadMembers reads a node's address book; a missing file is an empty one.
func loadMembers(fs vfs.FS, dir string) (map[uint64]string, error) {
	f, err := fs.Open(filepath.Join(dir, membersFile))
	if errors.Is(err, os.ErrNotExist) {
		return map[uint64]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, err
	}
	return decodeMembers(b)
}

// setMember records a member's address (addr "" removes it), in memory,
// on disk and with the owner's hook.
func (n *Node) setMember(id uint64, addr string) error {
	n.members.mu.Lock()
	if addr == "" {
		delete(n.members.addrs, id)
	} else {
		n.members.addrs[id] = addr
	}
	book := encodeMembers(n.members.addrs)
	n.members.mu.Unlock()
	if n.cfg.OnMember != nil {
		n.cfg.OnMember(id, addr)
	}
	return n.dir.writeFile(membersFile, book)
}

// applyConfChange applies a committed configuration change on the loop
// goroutine (raft wants it there) and records the new configuration.
func (n *Node) applyConfChange(e *raftpb.Entry) error {
	var cc raftpb.ConfChange
	if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
		return fmt.Errorf("cluster: configuration change at %d: %w", e.GetIndex(), err)
	}
	cs := n.rn.ApplyConfChange(&cc)
	n.confMu.Lock()
	n.conf = cs
	n.confMu.Unlock()
	w := n.cfg.Log.NewWrite()
	w.SetConfState(systemGroup, cs)
	if err := w.Commit(true); err != nil {
		return err
	}
	id := cc.GetNodeId()
	switch cc.GetType() {
	case raftpb.ConfChangeType_ConfChangeAddLearnerNode, raftpb.ConfChangeType_ConfChangeAddNode:
		if addr := string(cc.GetContext()); addr != "" {
			if err := n.setMember(id, addr); err != nil {
				return err
			}
		}
	case raftpb.ConfChangeType_ConfChangeRemoveNode:
		if id == n.cfg.ID {
			n.removed.Store(true)
		} else if err := n.setMember(id, ""); err != nil {
			return err
		}
	}
	n.log.Info("cluster: configuration changed", "node", n.cfg.ID, "change", cc.GetType().String(), "member", id,
		"voters", cs.GetVoters(), "learners", cs.GetLearners())
	return nil
}

// memberRequest asks the loop for a membership change.
type memberRequest struct {
	add  string // the address of a node to add as a learner
	drop uint64 // the id of a node to remove
	done chan memberAnswer
}

type memberAnswer struct {
	id  uint64
	err error
}

// AddMember adds the node at addr (its internal address) to the group as
// a learner and returns its new id; the leader promotes it to a voter
// once it has caught up. Only the ready leader takes it.
func (n *Node) AddMember(ctx context.Context, addr string) (uint64, error) {
	a, err := n.memberChange(ctx, memberRequest{add: addr})
	if err != nil {
		return 0, err
	}
	// Answer once the change is applied here: the new node's peers know it.
	for {
		if n.members.get(a.id) == addr {
			return a.id, nil
		}
		select {
		case <-ctx.Done():
			return a.id, errAmbiguous
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// RemoveMember removes node id from the group. The leader does not remove
// itself: it hands its leadership to another voter first and answers 503
// ServerBusy, and the caller asks again (the new leader then does it).
func (n *Node) RemoveMember(ctx context.Context, id uint64) error {
	if _, err := n.memberChange(ctx, memberRequest{drop: id}); err != nil {
		return err
	}
	for {
		n.confMu.Lock()
		in := slices.Contains(n.conf.GetVoters(), id) || slices.Contains(n.conf.GetLearners(), id)
		n.confMu.Unlock()
		if !in {
			return nil
		}
		select {
		case <-ctx.Done():
			return errAmbiguous
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (n *Node) memberChange(ctx context.Context, r memberRequest) (memberAnswer, error) {
	if !n.ready.Load() {
		return memberAnswer{}, errNotLeader(n.leader.Load())
	}
	r.done = make(chan memberAnswer, 1)
	select {
	case n.memberReqs <- r:
	case <-ctx.Done():
		return memberAnswer{}, ctx.Err()
	case <-n.stopped:
		return memberAnswer{}, ErrStopped
	}
	select {
	case a := <-r.done:
		return a, a.err
	case <-ctx.Done():
		return memberAnswer{}, errAmbiguous
	}
}

// handleMemberRequest proposes a membership change, on the loop.
func (n *Node) handleMemberRequest(r memberRequest) {
	st := n.rn.Status()
	if st.RaftState != raft.StateLeader {
		r.done <- memberAnswer{err: errNotLeader(st.Lead)}
		return
	}
	var cc *raftpb.ConfChange
	var id uint64
	switch {
	case r.add != "":
		for mid, addr := range n.members.all() {
			if addr == r.add {
				if _, ok := st.Progress[mid]; ok {
					r.done <- memberAnswer{id: mid} // already a member: joining again after a restart
					return
				}
			}
		}
		for pid := range st.Progress {
			id = max(id, pid)
		}
		for mid := range n.members.all() {
			id = max(id, mid)
		}
		id++
		cc = &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeAddLearnerNode.Enum(), NodeId: &id, Context: []byte(r.add)}
	default:
		id = r.drop
		if _, ok := st.Progress[id]; !ok {
			r.done <- memberAnswer{err: errBusy(fmt.Sprintf("node %d is not a member", id))}
			return
		}
		if id == n.cfg.ID {
			// Hand over first: a leader that removed itself would stop
			// before its successor is known.
			for pid, pr := range st.Progress {
				if pid != id && !pr.IsLearner {
					n.rn.TransferLeader(pid)
					break
				}
			}
			r.done <- memberAnswer{err: errBusy("this node leads: leadership is being handed over; ask again")}
			return
		}
		cc = &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeRemoveNode.Enum(), NodeId: &id}
	}
	if err := n.rn.ProposeConfChange(cc); err != nil {
		r.done <- memberAnswer{err: errBusy(err.Error())}
		return
	}
	r.done <- memberAnswer{id: id}
}

// promoteLearners proposes, on the leader, that a learner that has caught
// up become a voter. One change at a time: raft takes a new one only once
// the last is applied.
func (n *Node) promoteLearners() {
	st := n.rn.Status()
	if st.RaftState != raft.StateLeader || time.Since(n.lastPromotion) < time.Second {
		return
	}
	for id, pr := range st.Progress {
		if pr.IsLearner && pr.Match > 0 && pr.Match+catchUpSlack >= st.GetCommit() {
			cc := &raftpb.ConfChange{Type: raftpb.ConfChangeType_ConfChangeAddNode.Enum(), NodeId: &id, Context: []byte(n.members.get(id))}
			if err := n.rn.ProposeConfChange(cc); err == nil {
				n.lastPromotion = time.Now()
				n.log.Info("cluster: promoting a learner that caught up", "node", id, "match", pr.Match, "commit", st.GetCommit())
			}
			return
		}
	}
}

// catchUpSlack is how far behind the commit index a learner may be and
// still count as caught up: promoted, it will not hold back a quorum.
const catchUpSlack = 16

// writeFile replaces a small file of the data directory atomically and
// durably.
func (d *storeDir) writeFile(name string, b []byte) error {
	tmp := filepath.Join(d.dir, name+".tmp")
	f, err := d.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.fs.Rename(tmp, filepath.Join(d.dir, name))
	}
	if err == nil {
		err = vfs.SyncDir(d.fs, d.dir)
	}
	if err != nil {
		return fmt.Errorf("cluster: write %s: %w", name, err)
	}
	return nil
}
