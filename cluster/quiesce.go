package cluster

import (
	"encoding/binary"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/cluster/transport"
)

// Quiescence: an idle range group costs nothing. Raft ticks a group to
// send heartbeats and to time elections out; ten thousand idle groups
// ticked ten times a second would take a sizeable part of a core
// (BenchmarkIdleGroupTick). So a leader whose group has nothing in flight
// (everything applied, every live voter caught up and they a quorum, no
// read waiting) sends its followers one last heartbeat, carrying the
// commit index, and stops ticking the group; its node's next liveness
// message to each follower names the group, its term and that commit
// index, and a follower that knows it stops ticking the group too. Any message of the group but a heartbeat's answer, a
// proposal or a read wakes a replica, which ticks again from there.
//
// A quiesced follower cannot see its leader fail by missing heartbeats, so
// nodes prove they are alive once per tick for all their groups at once:
// each sends every peer one message in group 0, and any message from a
// node counts. A quiesced follower whose leader's node has not been heard
// from for an election timeout wakes, and raft elects a new leader; a
// quiesced leader that has not heard from a quorum wakes, and CheckQuorum
// makes it step down; one that hears again from a voter's node after a
// silence wakes, to bring that voter what it missed. The system group is
// never quiesced: its membership and snapshot work runs on its ticks, and
// it is one group.
//
// Group 0's messages are raftpb envelopes of type MsgHeartbeat from one
// node to another; their Context lists the groups the sender quiesced
// since its last one, as (uvarint group, uvarint term, uvarint commit
// index) triples. A member answers one from a node the cluster removed
// with a MsgHeartbeatResp marked Reject, and that node stops.

// liveness is the loop's record of when each peer was last heard from, in
// ticks of the node's raft clock, and of the quiesce notices to send.
type liveness struct {
	ticks   uint64            // ticks so far
	heard   map[uint64]uint64 // peer -> ticks at its last message
	notices map[uint64][]byte // peer -> (group, term, commit) notices to send
	silent  map[uint64]bool   // the peers found silent at the last tick
	// incarnation is this node's run, drawn at random when it starts;
	// runs the peers' runs as their liveness messages last named them.
	// A peer that restarted within an election timeout never looked
	// silent, yet its replicas lost what they had not made durable and
	// wait for their leaders, which may be quiesced: a new run counts as
	// the peer coming back (heardLiveness).
	incarnation uint64
	runs        map[uint64]uint64
	// checks and removed are the membership questions and answers to
	// send with the tick's liveness messages (range_members.go).
	checks, removed memberNotes
	// mergeChecks and frozenHere are the merge questions and answers to
	// send likewise, merged the answers to questions about orphans;
	// frozen the groups each peer said its store holds frozen, with the
	// tick of its last word (range_merge.go).
	mergeChecks, frozenHere, merged memberNotes
	frozen                          map[uint64]map[uint64]uint64
	// mergeHints are the frozen groups followers said they hold next to
	// a group this node leads: by that group, the frozen one and the
	// tick of the last word.
	mergeHints map[uint64]mergeHint
	// leases are the range-group leases each peer last said it holds,
	// and held this node's own count as of the last tick; loads and load
	// the same for the requests per second of the ranges they lead, as of
	// the last look at the leases (lease.go).
	leases, loads map[uint64]uint64
	held, load    uint64
	// busyLeaseAt is the tick of the last handover of a busy group's
	// lease (lease.go).
	busyLeaseAt uint64
}

// isLive reports whether node id was heard from within an election
// timeout. The node itself is always live.
func (n *Node) isLive(id uint64) bool {
	if id == n.cfg.ID {
		return true
	}
	at, ok := n.live.heard[id]
	return ok && n.live.ticks-at < uint64(n.cfg.ElectionTicks)
}

// livenessChanged reports whether a node fell silent since the last tick,
// and which nodes were heard again after a silence: only then may a
// quiesced replica have to wake, so on the other ticks the quiesced ones
// cost nothing. It watches every node ever heard from, not only the
// system group's members: a range group's voters (fixed) may include a
// node the system group has removed.
func (n *Node) livenessChanged() (fell bool, back []uint64) {
	for id := range n.live.heard {
		silent, was := !n.isLive(id), n.live.silent[id]
		if silent && !was {
			fell = true
		}
		if !silent && was {
			back = append(back, id)
		}
		n.live.silent[id] = silent
	}
	return fell, back
}

// peers returns the nodes of the system group's configuration.
func (n *Node) peers() []uint64 {
	n.confMu.Lock()
	defer n.confMu.Unlock()
	return append(slices.Clone(n.conf.GetVoters()), n.conf.GetLearners()...)
}

// sendLiveness sends every peer of the system group the node's message of
// the tick, with the quiesce notices gathered for it.
func (n *Node) sendLiveness(peers []uint64) {
	var out []*raftpb.Message
	for _, id := range peers {
		if id != n.cfg.ID {
			out = append(out, &raftpb.Message{
				Type:    raftpb.MessageType_MsgHeartbeat.Enum(),
				From:    proto.Uint64(n.cfg.ID),
				To:      proto.Uint64(id),
				Commit:  proto.Uint64(n.live.incarnation),
				Index:   proto.Uint64(n.live.held),
				LogTerm: proto.Uint64(n.live.load),
				Context: n.live.notices[id],
			})
		}
	}
	clear(n.live.notices)
	if len(out) > 0 {
		n.sendGroup(0, out)
	}
}

// heardLiveness takes a peer's group-0 message: the groups it quiesced
// are quiesced here too, if the peer still leads them in the same term
// and this replica knows the commit index the leader quiesced at.
func (n *Node) heardLiveness(m *raftpb.Message) {
	switch m.GetType() {
	case raftpb.MessageType_MsgHeartbeatResp:
		if m.GetReject() {
			n.toldRemoved(m.GetFrom())
		}
		return
	case msgMemberCheck:
		n.heardMemberCheck(m)
		return
	case msgMembersRemoved:
		n.heardMembersRemoved(m)
		return
	case msgMergeCheck:
		n.heardMergeCheck(m)
		return
	case msgFrozenHere:
		n.heardFrozenHere(m)
		return
	case msgMergedCheck:
		n.heardMergedCheck(m)
		return
	case msgMerged:
		n.heardMerged(m)
		return
	}
	if n.members.isRemoved(m.GetFrom()) {
		// A node removed while it was down, or that missed the entry
		// removing it (the leader stops sending to it once the change
		// applies), learns it from any member it still talks to.
		n.sendGroup(0, []*raftpb.Message{{
			Type:   raftpb.MessageType_MsgHeartbeatResp.Enum(),
			From:   proto.Uint64(n.cfg.ID),
			To:     proto.Uint64(m.GetFrom()),
			Reject: proto.Bool(true),
		}})
		return
	}
	from := m.GetFrom()
	n.live.leases[from], n.live.loads[from] = m.GetIndex(), m.GetLogTerm()
	if run := m.GetCommit(); run != 0 {
		if last, ok := n.live.runs[from]; !ok || last != run {
			// Restarted, or heard for the first time (a leader here may
			// have quiesced before, without it): the next tick finds it
			// back, and wakes the quiesced leaders of its groups that
			// quiesced with a voter behind (votersBehind).
			n.live.silent[from] = true
		}
		n.live.runs[from] = run
	}
	ctx := m.GetContext()
	for len(ctx) > 0 {
		var notice [3]uint64 // group, term, commit
		for f := range notice {
			v, k := binary.Uvarint(ctx)
			if k <= 0 {
				n.log.Warn("cluster: a malformed quiesce notice is ignored", "node", n.cfg.ID, "from", m.GetFrom())
				return
			}
			notice[f], ctx = v, ctx[k:]
		}
		g, term, commit := notice[0], notice[1], notice[2]
		// Quiet only a follower that knows everything the leader
		// committed: one that missed the last append or heartbeat would
		// otherwise stay behind until the group's next write.
		if r := n.replicas[g]; r != nil && g != systemGroup && !r.dormant() {
			st := r.rn.BasicStatus()
			if transport.NodeOf(st.Lead) == m.GetFrom() && st.GetTerm() == term && st.RaftState == raft.StateFollower && st.GetCommit() >= commit {
				r.quiesced.Store(true)
				r.rlog.DropCache()
				// Nothing ticks it now: what raft has ready for it (the
				// entries up to that commit, to apply) is done this turn.
				n.touch(r)
			}
		}
	}
}

// tickReplicas ticks every replica that is awake, first quiescing the idle
// ones and waking the quiesced ones whose peers went silent.
func (n *Node) tickReplicas(unreachable []uint64) {
	n.live.ticks++
	n.tickCount.Store(n.live.ticks)
	peers := n.peers()
	n.sendLiveness(peers)
	fell, back := n.livenessChanged()
	if fell || len(back) > 0 {
		// The unloaded replicas mustWake may wake.
		n.loadWhere(func(id uint64, u unloadedReplica) bool { return n.mustLoad(id, u, fell, back) })
	}
	n.warmCold()
	var unload []*replica
	for _, r := range n.replicaList {
		if r.quiesced.Load() {
			if (!fell && len(back) == 0) || !r.mustWake(fell, back) {
				r.maybeDoze()
				if r.readyToUnload() {
					unload = append(unload, r)
				}
				continue
			}
			r.quiesced.Store(false)
		} else if r.maybeQuiesce() {
			continue
		}
		r.quietTicks = 0
		r.continueHandOver()
		r.reconcile()
		r.noteSilence()
		for _, node := range unreachable {
			if r.group == systemGroup {
				r.rawNode().ReportUnreachable(node)
			} else if id := memberOf(r.conf, node); id != 0 {
				r.rawNode().ReportUnreachable(id)
			}
		}
		r.rawNode().Tick()
		n.touch(r)
		r.standForLostLeader()
		if r.campaignLeft == 0 && r.group != systemGroup && r.leader.Load() == 0 && n.replica.ready.Load() && n.live.ticks >= r.reelectUntil {
			// A range group with no leader this node knows of (the
			// cluster restarted, its leader's node died): the system
			// group's leader stands at once rather than leave the group
			// unavailable for a randomized election timeout. PreVote
			// keeps this from deposing a leader the others still hear.
			// A dormant leader just woken stands without pre-vote
			// (reelect): one now would abandon its election.
			r.campaignLeft = campaignTicks
		}
		if r.campaignLeft > 0 {
			if r.campaignLeft--; r.campaignLeft%2 == 0 {
				r.campaign()
			}
		}
	}
	n.unload(unload)
	if every := uint64(n.checkEveryTicks()); n.live.ticks%every == 0 && (n.st().HasFrozen() || n.live.ticks%(10*every) == 0) {
		n.noteMerges()
		n.forgetWaits()
	}
	n.sendMemberMessages()
}

// mustWake reports whether a quiesced replica must tick again: a
// follower whose leader's node fell silent (to elect another) or came
// back; a leader that no longer hears a quorum of its voters
// (CheckQuorum then deposes it), or one of whose voters' nodes is heard
// again after a silence or a restart when the leader quiesced with that
// voter lacking entries, which only the leader's ticks bring it.
func (r *replica) mustWake(fell bool, back []uint64) bool {
	if !r.dormantLeader.Load() && (r.dormant() || r.rn.BasicStatus().RaftState != raft.StateLeader) {
		// Its leader's node went silent, or came back (it may have
		// restarted, and lost its leadership with it).
		lead := r.leader.Load()
		return (fell && !r.n.isLive(lead)) || slices.Contains(back, lead)
	}
	return r.n.leaderMustWake(r.voterNodes(), r.votersBehind, fell, back)
}

// leaderMustWake is mustWake for a quiesced leader whose group's voters
// are on nodes voters: one that no longer hears a quorum of them, or, if
// it quiesced with votersBehind, one of whose voters is back. A voter
// that had every entry misses nothing while the group is idle: a restart
// leaves it all it acknowledged.
func (n *Node) leaderMustWake(voters []uint64, votersBehind, fell bool, back []uint64) bool {
	for _, id := range back {
		if votersBehind && slices.Contains(voters, id) {
			return true
		}
	}
	if !fell {
		return false
	}
	live := 0
	for _, id := range voters {
		if n.isLive(id) {
			live++
		}
	}
	return live*2 <= len(voters)
}

// mustLoad says whether the unloaded replica of group id is loaded again
// for a liveness change: whether mustWake may wake it. A dormant
// leader's voters are its descriptor's (an unloaded replica has no
// change of them under way, unless moving); one without a descriptor
// (tests' groups) loads to read its configuration. One unloaded since
// the start knows no leader to lose: its group's next message or
// request loads it.
func (n *Node) mustLoad(id uint64, u unloadedReplica, fell bool, back []uint64) bool {
	switch {
	case u.cold:
		return false
	case !u.dormantLeader:
		return (fell && !n.isLive(u.leader)) || slices.Contains(back, u.leader)
	}
	tg, ok, err := n.st().GroupTable(id)
	if err != nil || !ok || u.moving {
		return true // loaded, it learns from its group
	}
	return n.leaderMustWake(tg.Group.Voters, u.votersBehind, fell, back)
}

// standForLostLeader calls an election at once in a group whose leader's
// node has been silent for an election timeout and one tick, rather than
// leave it to raft's randomized timeout, up to twice as long. Raft's
// followers wait an election timeout after their leader's last word
// before they vote for another, and so does this, so no read lease is
// broken (readLease). The other followers' waits may end a tick or two
// later (their ticks are their own), and they ignore a vote asked of them
// before: the replica asks again on each of the next few ticks while no
// leader is elected. Only the live voter with the smallest node id
// stands, so that two candidates do not split the vote; the others, and
// this one if it fails, keep raft's timeout, which this does not reset.
func (r *replica) standForLostLeader() {
	n := r.n
	st := r.rawNode().BasicStatus()
	switch {
	case r.guardingVotes():
		return
	case st.RaftState == raft.StateFollower && r.leader.Load() != 0:
		// The leader as the replica last knew it, which raft forgets
		// when the replica wakes from dormancy (dormant.go).
		r.lostLead = r.leader.Load()
	case st.RaftState != raft.StatePreCandidate || r.lostLead == 0:
		r.lostLead = 0
		return
	}
	at, ok := n.live.heard[r.lostLead]
	silent, timeout := n.live.ticks-at, uint64(n.cfg.ElectionTicks)
	if !ok || silent <= timeout || silent > timeout+standTicks {
		return
	}
	voters := r.voterNodes()
	if !slices.Contains(voters, n.cfg.ID) {
		return
	}
	for _, v := range voters {
		if v != r.lostLead && v < n.cfg.ID && n.isLive(v) {
			return
		}
	}
	_ = r.rawNode().Campaign() // a learner's refusal: nothing to do
	n.touch(r)
}

// standTicks is how many ticks standForLostLeader asks for votes.
const standTicks = 4

// maybeQuiesce quiesces a leader's group that has nothing in flight: it
// sends its live followers a last heartbeat, queues the quiesce notices
// for the node's next liveness message, and reports true. A quorum of
// caught-up live voters is required, so a group whose followers are gone
// keeps ticking and CheckQuorum can act; and every live voter must be
// caught up, since once quiesced nothing brings a follower what it missed.
func (r *replica) maybeQuiesce() bool {
	if r.group == systemGroup || !r.ready.Load() || len(r.readsByCtx) > 0 || r.rawNode().HasReady() || !r.settled() || r.spanWorkDue() || r.handover.to != 0 {
		return false
	}
	st := r.rawNode().Status()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != 0 {
		return false
	}
	commit := st.GetCommit()
	last, err := r.rlog.LastIndex()
	if err != nil || last != commit || r.applied.Load() != commit {
		return false
	}
	voters, caughtUp, behind := 0, 0, false
	for id, pr := range st.Progress {
		if pr.IsLearner {
			return false // a learner catching up needs the ticks
		}
		voters++
		if !r.n.isLive(transport.NodeOf(id)) {
			behind = behind || pr.Match != commit
			continue
		}
		if pr.Match != commit {
			return false // a live follower behind: the ticks catch it up
		}
		caughtUp++
	}
	if caughtUp*2 <= voters {
		return false
	}
	n := r.n
	r.dropCommitNotices() // the heartbeats carry the commit index
	var out []*raftpb.Message
	for id, pr := range st.Progress {
		node := transport.NodeOf(id)
		if id == r.id || !n.isLive(node) {
			continue
		}
		out = append(out, &raftpb.Message{
			Type:   raftpb.MessageType_MsgHeartbeat.Enum(),
			From:   proto.Uint64(r.id),
			To:     proto.Uint64(id),
			Term:   proto.Uint64(st.GetTerm()),
			Commit: proto.Uint64(min(pr.Match, commit)),
		})
		notice := binary.AppendUvarint(n.live.notices[node], r.group)
		notice = binary.AppendUvarint(notice, st.GetTerm())
		n.live.notices[node] = binary.AppendUvarint(notice, commit)
	}
	n.sendGroup(r.group, out)
	r.quiesced.Store(true)
	r.votersBehind = behind
	// Every live voter has every entry: none will be sent again soon.
	r.rlog.DropCache()
	return true
}

// wakes reports whether stepping m wakes a quiesced replica: everything
// does but an answer to a heartbeat, which a quiesced leader gets for its
// last one.
func wakes(m *raftpb.Message) bool {
	return m.GetType() != raftpb.MessageType_MsgHeartbeatResp
}

// toldRemoved takes a member's word that the cluster removed this node:
// recorded, so a restart stops at once too, and the loop stops.
func (n *Node) toldRemoved(by uint64) {
	if n.removed.Load() {
		return
	}
	n.log.Warn("cluster: a member says the cluster removed this node; stopping", "node", n.cfg.ID, "member", by)
	if err := n.updateMembers(func(b *memberBook) { b.removed[n.cfg.ID] = true }); err != nil {
		n.log.Error("cluster: recording this node's removal", "err", err)
	}
	n.removed.Store(true)
}
