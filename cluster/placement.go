package cluster

import (
	"context"
	"fmt"
	"iter"
	"math"
	"slices"
	"time"

	"github.com/tabuladb/tabula/cluster/command"
	"github.com/tabuladb/tabula/internal/shrink"
	"github.com/tabuladb/tabula/partition"
)

// Placement decides where a table's range group lives: the nodes its
// descriptor names as voters. Changing them is a command of the system
// group (kind 8, set-range-voters), so every replica's catalog agrees on
// it; the group's leader then moves the members (range_members.go).

// ErrBadPlacement is wrapped by the refusal of a placement that cannot
// be done anywhere: a table without a range group, voters that are not
// nodes of the cluster.
var ErrBadPlacement = fmt.Errorf("cluster: no such placement")

// SetTableVoters names the nodes a table's first range's group (its only
// one, unless it was split) is to have as voters, as SetGroupVoters does.
func (n *Node) SetTableVoters(ctx context.Context, account, table string, voters []uint64) error {
	g, err := n.st().TableGroup(account, table)
	switch {
	case err != nil:
		return err
	case g.ID == 0:
		return fmt.Errorf("%w: table %s has no range group (the system group replicates it)", ErrBadPlacement, table)
	}
	return n.SetGroupVoters(ctx, g.ID, voters)
}

// SetGroupVoters names the nodes range group group is to have as voters.
// It is asked of the system group's ready leader, and returns once every
// replica of the system group will record it (the command is applied
// here); the group's members move after that.
func (n *Node) SetGroupVoters(ctx context.Context, group uint64, voters []uint64) error {
	tg, ok, err := n.st().GroupTable(group)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: no table has range group %d", ErrBadPlacement, group)
	}
	if err := partition.ValidVoters(voters); err != nil {
		return fmt.Errorf("%w: %v", ErrBadPlacement, err)
	}
	members := n.peers()
	for _, v := range voters {
		if !slices.Contains(members, v) {
			return fmt.Errorf("%w: node %d is not a member of the cluster", ErrBadPlacement, v)
		}
	}
	_, err = n.Store().write(ctx, &command.Command{Kind: command.KindSetRangeVoters, Account: tg.Account, Table: tg.Table, Group: group, Voters: voters}, 0)
	return err
}

// The placement controller runs on the system group's ready leader, once
// per PlacementInterval. From the catalog's descriptors, the system
// group's voters, the members draining and the nodes' liveness, it names
// new voters for the range groups that need them:
//
//   - re-replication: a voter that is dead (not heard from for
//     DeadAfter), draining, or no longer a voter of the system group is
//     replaced by a live node the group does not have, the one named in
//     the fewest groups; a group with fewer than three voters gains one
//     when a node is free for it;
//   - balance: when no group needed that, one group moves from the node
//     carrying the most weight to the one carrying the least, if one
//     evens them out (balanceMove); a group weighs its range's bytes and
//     load (weight) plus a constant, so that empty groups spread too.
//
// A group named anew, by the controller or an operator, is left alone by
// the balance for settleRounds rounds, time for its leader to move the
// members, and the balance moves the group named longest ago first, so an
// operator's move stays while another group can go instead: every node
// notes the names its system group applies (recentNames), for one settle
// window. The controller forgets its own state when the leadership
// moves, but for the nodes recorded down in the system group
// (recordLiveness): a new leader counts every other node as alive from
// its first round.

// settleRounds is how many rounds the balance leaves a group named.
const settleRounds = 10

// maxNamedPerRound bounds the groups one round names anew: each starts
// span snapshots, which the leaders stream at once.
const maxNamedPerRound = 4

// placement is the controller's state; its goroutine owns it.
type placement struct {
	lastAlive map[uint64]time.Time // by node, while this node leads
	// rounds counts the rounds while this node leads.
	rounds int
	// coldSince is when each range (by its group) was first seen cold
	// with the range before it, in the looks since: at most maxTracked.
	coldSince map[uint64]coldPair
	coldPeak  int // see shrink.Map
	// weights are the heaviest range groups' bytes and load, as weight
	// counts them, at the last look at the ranges (reshape): see
	// rangeSurvey.
	weights map[uint64]float64
}

// coldPair is a range timed cold with the one before it (placement's
// coldSince, by the range's group): since when, and the group of the
// range before it.
type coldPair struct {
	since time.Time
	left  uint64
}

// maxTracked bounds what the controller keeps per range group, in its
// looks at the ranges (rangeSurvey) and between them, so that the system
// group's leader holds no entry per range of the cluster: the cold
// ranges it times for a merge, and the weights of the heaviest groups.
// One merge is made per look, so a few thousand candidates are more than
// the merges can use.
const maxTracked = 4096

// runPlacement runs the controller until the node stops.
func (n *Node) runPlacement() {
	if n.cfg.PlacementInterval < 0 {
		return
	}
	t := time.NewTicker(n.cfg.PlacementInterval)
	defer t.Stop()
	var p placement
	for {
		select {
		case <-n.stopped:
			return
		case <-t.C:
		}
		if !n.ready.Load() {
			p = placement{}
			continue
		}
		if p.lastAlive == nil {
			p = placement{lastAlive: map[uint64]time.Time{}, coldSince: map[uint64]coldPair{}}
		}
		p.round(n, time.Now())
	}
}

// round looks at every range group once and names new voters for those
// that need them.
func (p *placement) round(n *Node, now time.Time) {
	st := n.status.Load()
	if st == nil {
		return
	}
	n.confMu.Lock()
	voters := slices.Clone(n.conf.GetVoters())
	n.confMu.Unlock()
	book := n.members.clone()
	down, err := n.st().NodesDown()
	if err != nil {
		n.log.Warn("cluster: placement: read the nodes recorded down", "err", err)
	}
	var usable []uint64 // live, not draining: where members may go
	for _, v := range voters {
		switch {
		case v == n.cfg.ID || st.live[v]:
			p.lastAlive[v] = now
		case p.lastAlive[v].IsZero():
			// This controller's first look: a node the system group
			// recorded down counts from then, not from this election.
			p.lastAlive[v] = now
			if t, ok := down[v]; ok && t.Before(now) {
				p.lastAlive[v] = t
			}
		}
		if (v == n.cfg.ID || st.live[v]) && !book.draining[v] {
			usable = append(usable, v)
		}
	}
	p.recordLiveness(n, voters, down, now)
	gone := func(v uint64) bool {
		return !slices.Contains(voters, v) || book.draining[v] || now.Sub(p.lastAlive[v]) > n.cfg.DeadAfter
	}
	// The catalog is walked, never held: a round keeps per node, not per
	// group, whatever the cluster's size.
	var walkErr error
	groups := func(yield func(partition.TableGroup) bool) {
		if walkErr == nil {
			walkErr = n.st().EachTableGroup(yield)
		}
	}
	walkFailed := func() bool {
		if walkErr != nil {
			n.log.Warn("cluster: placement: read the catalog's range groups", "err", walkErr)
		}
		return walkErr != nil
	}
	load := map[uint64]int{}
	for tg := range groups {
		for _, v := range tg.Group.Voters {
			load[v]++
		}
	}
	// pick returns the usable node outside have named in the fewest groups.
	pick := func(have []uint64) uint64 {
		var best uint64
		for _, v := range usable {
			if !slices.Contains(have, v) && (best == 0 || load[v] < load[best] || load[v] == load[best] && v < best) {
				best = v
			}
		}
		return best
	}
	type rename struct {
		tg   partition.TableGroup
		want []uint64
	}
	var renames []rename // named once the walk is over, not under its iterator
	for tg := range groups {
		if len(renames) == maxNamedPerRound {
			break
		}
		want := slices.DeleteFunc(slices.Clone(tg.Group.Voters), gone)
		for _, v := range tg.Group.Voters {
			if gone(v) {
				if to := pick(want); to != 0 {
					want = append(want, to)
					load[to]++
					load[v]--
				} else {
					want = append(want, v) // nowhere to go: it stays named
				}
			}
		}
		for len(want) < defaultGroupVoters {
			to := pick(want)
			if to == 0 {
				break
			}
			want = append(want, to)
			load[to]++
		}
		if !slices.Equal(want, tg.Group.Voters) {
			renames = append(renames, rename{tg, want})
		}
	}
	if walkFailed() {
		return
	}
	named := 0
	for _, r := range renames {
		if p.name(n, r.tg, r.want, "re-replication") {
			named++
		}
	}
	if named > 0 || p.reshape(n, now, st.live) || len(usable) < 2 {
		return
	}
	// Balance: one group from the most loaded usable node to the least.
	// The group named longest ago among those that even the two out goes:
	// an operator's recent move stays as long as another can go instead.
	recent := n.names.since(now)
	settled := func(tg partition.TableGroup) bool {
		_, named := recent[tg.Group.ID]
		return !named
	}
	move, from, to := balanceMove(usable, groups, p.groupWeight, settled, recent)
	if walkFailed() || move == nil {
		return
	}
	want := slices.Clone(move.Group.Voters)
	want[slices.Index(want, from)] = to
	p.name(n, *move, want, "balance")
}

// groupBaseWeight is what a range group weighs on its nodes beyond its
// bytes and load (weight): the cost of one more group (its raft state,
// its share of the ticks), so that empty, idle groups spread evenly too.
const groupBaseWeight = 16 << 20

// groupWeight is a range group's weight on each node that holds it: its
// range's bytes and load as the last look at the ranges saw them
// (reshape; nothing for a group the rangeSurvey left out), plus
// groupBaseWeight.
func (p *placement) groupWeight(g uint64) float64 {
	return groupBaseWeight + p.weights[g]
}

// balanceMove picks the group to move for balance, and from which usable
// node to which: the nodes carrying the most and the least weight, and
// among the groups on the first and not on the second that settled
// accepts, one lighter than the difference between them (so the sum of
// the squares of the nodes' loads falls with every move, and balance
// moves cannot cycle while the weights hold), the one that leaves the two
// closest to even, the one named longest ago among equals. With every
// group of one weight it moves one group while the counts differ by two
// or more, as counting groups did. It returns a nil group when no move
// evens the load out.
func balanceMove(usable []uint64, groups iter.Seq[partition.TableGroup], weight func(uint64) float64,
	settled func(partition.TableGroup) bool, named map[uint64]time.Time) (*partition.TableGroup, uint64, uint64) {
	if len(usable) < 2 {
		return nil, 0, 0
	}
	load := map[uint64]float64{}
	for tg := range groups {
		for _, v := range tg.Group.Voters {
			load[v] += weight(tg.Group.ID)
		}
	}
	most, least := usable[0], usable[0]
	for _, v := range usable {
		if load[v] > load[most] {
			most = v
		}
		if load[v] < load[least] {
			least = v
		}
	}
	diff := load[most] - load[least]
	var move *partition.TableGroup
	var moveGap float64 // |diff - 2w| of move: how uneven the two are left
	for tg := range groups {
		w := weight(tg.Group.ID)
		if !tg.Group.Has(most) || tg.Group.Has(least) || w >= diff || !settled(tg) {
			continue
		}
		gap := math.Abs(diff - 2*w)
		if move == nil || gap < moveGap || gap == moveGap && named[tg.Group.ID].Before(named[move.Group.ID]) {
			move, moveGap = &tg, gap
		}
	}
	return move, most, least
}

// recordLiveness keeps the system group's record of the nodes down in
// step with what the controller sees: a voter silent for a tenth of
// DeadAfter is recorded down since it was last heard, and a node recorded
// down that is heard again, or is no longer a voter, is cleared. The
// record changes only when a node falls silent or comes back, so it
// costs the log nothing while the cluster is well; a new controller
// reads it (round).
func (p *placement) recordLiveness(n *Node, voters []uint64, down map[uint64]time.Time, now time.Time) {
	record := func(node uint64, since int64) {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
		defer cancel()
		if _, err := n.Store().write(ctx, &command.Command{Kind: command.KindNodeDown, Node: node, Since: since}, 0); err != nil {
			n.log.Warn("cluster: placement: record a node's liveness", "node", node, "since", since, "err", err)
		}
	}
	for _, v := range voters {
		_, recorded := down[v]
		silent := now.Sub(p.lastAlive[v])
		switch {
		case silent == 0 && recorded:
			record(v, 0)
		case silent > n.cfg.DeadAfter/10 && !recorded:
			record(v, p.lastAlive[v].UnixNano())
		}
	}
	for v := range down {
		if !slices.Contains(voters, v) {
			record(v, 0)
		}
	}
}

// name proposes want as a group's voters, and reports whether the system
// group took it.
func (p *placement) name(n *Node, tg partition.TableGroup, want []uint64, why string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
	defer cancel()
	if err := n.SetGroupVoters(ctx, tg.Group.ID, want); err != nil {
		n.log.Warn("cluster: placement: naming a range group's voters failed", "group", tg.Group.ID, "table", tg.Table, "voters", want, "err", err)
		return false
	}
	n.log.Info("cluster: placement: a range group's voters named anew", "group", tg.Group.ID, "table", tg.Table,
		"from", tg.Group.Voters, "to", want, "why", why)
	return true
}

// splitEveryRounds is how many rounds pass between two looks for range
// groups to split: each asks every node for its ranges.
const splitEveryRounds = 5

// reshape, every splitEveryRounds rounds, splits or merges one range:
// it reports whether it did.
func (p *placement) reshape(n *Node, now time.Time, live map[uint64]bool) bool {
	if p.rounds++; p.rounds%splitEveryRounds != 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
	defer cancel()
	coldOps, mergeBytes := n.st().MergeThresholds()
	if n.cfg.MergeAfter < 0 {
		coldOps = 0
	}
	survey := newRangeSurvey(maxTracked, coldOps, mergeBytes, p.coldSince)
	for rs := range n.rangeStats(ctx) {
		survey.add(rs)
	}
	p.weights = survey.heaviestWeights()
	return p.split(ctx, n, survey.splits) || p.merge(ctx, n, survey, now, live)
}

// rangeStats yields every range's status from its leaseholder
// (Config.RangeStats), or the ranges this node leads without it.
func (n *Node) rangeStats(ctx context.Context) iter.Seq[RangeStatus] {
	if n.cfg.RangeStats != nil {
		return n.cfg.RangeStats(ctx)
	}
	return n.eachRange(ctx)
}

// split splits the range of one of the range groups of stats whose
// leaseholder's store holds two or more range partitions in it (the
// store splits its partitions past a size or a load: Options.SplitBytes,
// SplitOpsPerSecond), at the partition boundary that halves its bytes
// and load best, so a group follows its partitions. It reports whether
// it split one.
func (p *placement) split(ctx context.Context, n *Node, stats []RangeStatus) bool {
	for _, rs := range stats {
		if rs.Group == systemGroup || len(rs.Partitions) < 2 {
			continue
		}
		at, best := "", 0.0
		var below partition.RangeInfo
		total := weight(partition.RangeInfo{Bytes: rs.Bytes, ReadsPerSecond: rs.ReadsPerSecond, WritesPerSecond: rs.WritesPerSecond})
		for _, ri := range rs.Partitions {
			if ri.StartPartitionKey > rs.StartPartitionKey {
				// The smaller side's share: 0.5 is an even split.
				if share := min(weight(below), total-weight(below)) / max(total, 1); at == "" || share > best {
					at, best = ri.StartPartitionKey, share
				}
			}
			below.Bytes += ri.Bytes
			below.ReadsPerSecond += ri.ReadsPerSecond
			below.WritesPerSecond += ri.WritesPerSecond
		}
		if at == "" {
			continue
		}
		if err := n.SplitTable(ctx, rs.Account, rs.Table, at); err != nil {
			n.log.Warn("cluster: placement: splitting a range failed", "group", rs.Group, "table", rs.Table, "at", at, "err", err)
			continue
		}
		n.log.Info("cluster: placement: a range split along its partitions", "group", rs.Group, "table", rs.Table, "at", at,
			"partitions", len(rs.Partitions), "bytes", rs.Bytes)
		return true
	}
	return false
}

// weight is how much of a range's size and load a partition holds, as
// one number: bytes, plus a megabyte per operation a second.
func weight(ri partition.RangeInfo) float64 {
	return float64(ri.Bytes) + (ri.ReadsPerSecond+ri.WritesPerSecond)*(1<<20)
}

// merge works toward the merge of one range into the range before it,
// once the two have stayed cold together for MergeAfter (as the stores
// merge their own partitions: partition.Store.MergeThresholds): it names
// the left group's voters for the right group, and once both groups'
// members are there, all live, records the merge. It reports whether it
// did either. It pairs the survey's cold ranges (each cold and small
// enough, none the system group's), and times at most maxTracked pairs.
func (p *placement) merge(ctx context.Context, n *Node, survey *rangeSurvey, now time.Time, live map[uint64]bool) bool {
	if n.cfg.MergeAfter < 0 {
		return false
	}
	stats := survey.coldRanges()
	type rangeKey struct{ account, table, end string }
	byEnd := map[rangeKey]RangeStatus{} // a range, by where it ends
	for _, rs := range stats {
		if rs.EndPartitionKey != "" {
			byEnd[rangeKey{rs.Account, rs.Table, rs.EndPartitionKey}] = rs
		}
	}
	cold := map[uint64]bool{}
	defer func() {
		for g := range p.coldSince {
			if !cold[g] {
				delete(p.coldSince, g) // warm again, or gone
			}
		}
		p.coldSince = shrink.Map(p.coldSince, &p.coldPeak)
	}()
	for _, right := range stats {
		if right.StartPartitionKey == "" {
			continue
		}
		left, ok := byEnd[rangeKey{right.Account, right.Table, right.StartPartitionKey}]
		if !ok || left.Bytes+right.Bytes >= survey.mergeBytes {
			continue
		}
		cold[right.Group] = true
		pair, timed := p.coldSince[right.Group]
		if !timed {
			if len(p.coldSince) >= maxTracked {
				continue // timed from a later look, once others merged or warmed
			}
			pair.since = now
		}
		pair.left = left.Group
		p.coldSince[right.Group] = pair
		if now.Sub(pair.since) < n.cfg.MergeAfter {
			continue
		}
		if !sameNodes(left.Replicas, right.Replicas) {
			tg, ok, err := n.st().GroupTable(right.Group)
			return err == nil && ok && p.name(n, tg, slices.Clone(left.Replicas), "merge into the range before it")
		}
		allLive := true
		for _, v := range left.Replicas {
			allLive = allLive && (v == n.cfg.ID || live[v])
		}
		if !allLive || !left.settled() || !right.settled() {
			continue // the members are still moving, or a node is away
		}
		if err := n.mergeTable(ctx, right.Account, right.Table, right.StartPartitionKey, stats); err != nil {
			n.log.Warn("cluster: placement: merging a range failed", "group", right.Group, "table", right.Table, "err", err)
			continue
		}
		delete(p.coldSince, right.Group)
		n.log.Info("cluster: placement: a cold range merged into the one before it", "group", right.Group, "into", left.Group,
			"table", right.Table, "at", right.StartPartitionKey, "bytes", left.Bytes+right.Bytes)
		return true
	}
	return false
}

// settled says whether a range's group has its members where its
// descriptor names them, all voters.
func (rs RangeStatus) settled() bool {
	return sameNodes(rs.Members, rs.Replicas) && len(rs.Learners) == 0
}

// sameNodes says whether two lists hold the same nodes.
func sameNodes(a, b []uint64) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}
