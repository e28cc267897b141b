package cluster

import (
	"encoding/binary"
	"fmt"

	"github.com/tabuladb/tabula/lsm"
)

// The records of unloaded replicas live in the node's raft log engine
// (raftlog's unloaded records), not in memory: a node hosting many idle
// ranges holds nothing of them beyond their count. They are written
// unsynced, since a node that starts clears them and records its idle
// groups afresh (hostTableGroups), and read with one engine lookup, which
// only requests for a group not loaded here pay.
//
// Every function here is called under replicasMu (a read lock to read,
// the write lock to write), which orders the records against the
// replicas map: a group is in one or the other, or neither, at any
// moment another goroutine can see. A failure of the engine is returned;
// the caller makes the node fail once it has released the lock.

// unloadedRecordVersion is the first byte of an encoded record.
const unloadedRecordVersion = 1

// The flags byte of an encoded record.
const (
	flagDormantLeader = 1 << iota
	flagTableless
	flagVotersBehind
	flagCold
	flagLoading
	flagMoving
	flagsKnown = 1<<iota - 1
)

// encode returns the record as the engine stores it:
// version | uvarint(leader) | uvarint(applied) | varint(lastStamp) |
// varint(appliedTS) | flags (docs/raftlog.md).
func (u unloadedReplica) encode() []byte {
	v := make([]byte, 0, 1+4*binary.MaxVarintLen64+1)
	v = append(v, unloadedRecordVersion)
	v = binary.AppendUvarint(v, u.leader)
	v = binary.AppendUvarint(v, u.applied)
	v = binary.AppendVarint(v, u.lastStamp)
	v = binary.AppendVarint(v, u.appliedTS)
	flags := flagIf(u.dormantLeader, flagDormantLeader) | flagIf(u.tableless, flagTableless) |
		flagIf(u.votersBehind, flagVotersBehind) | flagIf(u.cold, flagCold) |
		flagIf(u.loading, flagLoading) | flagIf(u.moving, flagMoving)
	return append(v, flags)
}

// flagIf returns flag if set, else 0.
func flagIf(set bool, flag byte) byte {
	if set {
		return flag
	}
	return 0
}

// decodeUnloaded parses an encoded record; anything else is corruption.
func decodeUnloaded(v []byte) (unloadedReplica, error) {
	var u unloadedReplica
	if len(v) == 0 || v[0] != unloadedRecordVersion {
		return u, fmt.Errorf("%w: unloaded record %x: unknown version", lsm.ErrCorruption, v)
	}
	rest, ok := v[1:], true
	uvarint := func() uint64 {
		x, k := binary.Uvarint(rest)
		ok, rest = ok && k > 0, rest[max(k, 0):]
		return x
	}
	varint := func() int64 {
		x, k := binary.Varint(rest)
		ok, rest = ok && k > 0, rest[max(k, 0):]
		return x
	}
	u.leader, u.applied = uvarint(), uvarint()
	u.lastStamp, u.appliedTS = varint(), varint()
	if !ok || len(rest) != 1 || rest[0]&^flagsKnown != 0 {
		return unloadedReplica{}, fmt.Errorf("%w: unloaded record %x: malformed", lsm.ErrCorruption, v)
	}
	flags := rest[0]
	u.dormantLeader, u.tableless = flags&flagDormantLeader != 0, flags&flagTableless != 0
	u.votersBehind, u.cold = flags&flagVotersBehind != 0, flags&flagCold != 0
	u.loading, u.moving = flags&flagLoading != 0, flags&flagMoving != 0
	return u, nil
}

// unloadedOf returns the record of group id's replica, if it is unloaded.
func (n *Node) unloadedOf(id uint64) (unloadedReplica, bool, error) {
	v, ok, err := n.cfg.Log.Unloaded(id)
	if err != nil || !ok {
		return unloadedReplica{}, false, err
	}
	u, err := decodeUnloaded(v)
	if err != nil {
		return u, false, fmt.Errorf("cluster: group %d: %w", id, err)
	}
	return u, true, nil
}

// eachUnloaded calls fn with every record, in group order, until fn
// returns false.
func (n *Node) eachUnloaded(fn func(id uint64, u unloadedReplica) bool) error {
	var derr error
	err := n.cfg.Log.EachUnloaded(func(id uint64, v []byte) bool {
		u, err := decodeUnloaded(v)
		if err != nil {
			derr = fmt.Errorf("cluster: group %d: %w", id, err)
			return false
		}
		return fn(id, u)
	})
	if err != nil {
		return err
	}
	return derr
}

// setUnloaded writes the records of recs, added of them new ones (the
// others rewrite records of groups still unloaded).
func (n *Node) setUnloaded(recs map[uint64]unloadedReplica, added int) error {
	enc := make(map[uint64][]byte, len(recs))
	for id, u := range recs {
		enc[id] = u.encode()
	}
	if err := n.cfg.Log.SetUnloaded(enc); err != nil {
		return err
	}
	n.unloadedCount += added
	return nil
}

// dropUnloaded deletes the record of group id, if there is one, and
// returns it.
func (n *Node) dropUnloaded(id uint64) (unloadedReplica, bool, error) {
	u, ok, err := n.unloadedOf(id)
	if err != nil || !ok {
		return u, ok, err
	}
	if err := n.cfg.Log.DeleteUnloaded(id); err != nil {
		return u, false, err
	}
	n.unloadedCount--
	return u, true, nil
}
