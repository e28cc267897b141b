package cluster

import (
	"context"
	"slices"
)

// Warming. A group that no node has loaded since a restart of the whole
// cluster has no leader, and so no leaseholder reports its range: the
// status, and the placement controller's splits and merges, do not see
// it. So a node, an election timeout after its start, asks every node
// for the ranges their leaseholders report, and warms the cold records
// of the others whose descriptor names it at the group's id modulo the
// number of voters: one a tick, loaded and standing for election at
// once. Elected, and idle again, the group quiesces, dozes and unloads
// as any other, with its leader known. A node that restarts alone warms
// nothing: its groups' leaders, awake or dormant, report their ranges.
// The replicas loaded for warming at once are bounded by its rate and
// the unload wait, and by warmLimit, not by the number of ranges. A
// group whose warming node is down stays cold until it is used.

// warmLimit is the most range replicas a node holds loaded and still
// warms another.
const warmLimit = 256

// warmState is where a node is in its warming.
type warmState int

const (
	warmUnasked warmState = iota // the reported ranges not asked for yet
	warmAsking
	warmReady
)

// warmCold warms the next cold record this node is to warm, once it has
// been up for an election timeout (the vote guard of a replica started
// with it: voteAfter), knows which ranges are reported, and holds few
// replicas loaded. It runs on the loop, every tick.
func (n *Node) warmCold() {
	if n.noWarming || len(n.toWarm) == 0 || n.live.ticks < uint64(n.cfg.ElectionTicks) || len(n.replicaList) > warmLimit {
		return
	}
	switch n.warm {
	case warmUnasked:
		n.warm = warmAsking
		go n.askReported()
		return
	case warmAsking:
		return
	}
	for len(n.toWarm) > 0 {
		id := n.toWarm[0]
		n.toWarm = n.toWarm[1:]
		if u, ok := n.unloadedReplica(id); !ok || !u.cold {
			continue // loaded already, by a message or a request
		}
		if r := n.replicaOf(id); r != nil {
			r.standNow()
		}
		break
	}
	if len(n.toWarm) == 0 {
		n.toWarm = nil
	}
}

// askReported asks every node for the ranges their leaseholders report,
// and has the loop take those groups off the ones to warm.
func (n *Node) askReported() {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RequestTimeout)
	defer cancel()
	reported := map[uint64]bool{} // of the groups hosted here: the others are not to warm
	for rs := range n.rangeStats(ctx) {
		if n.hostsGroup(rs.Group) {
			reported[rs.Group] = true
		}
	}
	select {
	case n.calls <- func() {
		n.toWarm = slices.DeleteFunc(n.toWarm, func(id uint64) bool { return reported[id] })
		n.warm = warmReady
	}:
	case <-n.stopped:
	}
}
