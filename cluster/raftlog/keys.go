package raftlog

import (
	"encoding/binary"
	"fmt"

	"github.com/tabuladb/tabula/lsm"
)

// The key layout (docs/raftlog.md). The first byte of every key is its
// namespace: 01 for the meta keys of the engine, 02 for the state of the
// groups, 03 for the unloaded records (unloaded.go). A group's keys are
// 02 | u64be(group) | kind [| u64be(index)], so every key of a group is
// contiguous and its entries are in index order after its other state.
const (
	nsMeta     = 0x01
	nsGroup    = 0x02
	nsUnloaded = 0x03 // 03 | u64be(group); value: the caller's

	// metaFormatVersion is the key 01 01; its value is uvarint(version).
	metaFormatVersion = 0x01

	kindHardState = 0x01 // value: raftpb.HardState
	kindConfState = 0x02 // value: raftpb.ConfState
	kindTruncated = 0x03 // value: raftpb.Entry with only Index and Term: the last compacted entry
	kindEntry     = 0x04 // key ends with u64be(index); value: raftpb.Entry
	kindReplica   = 0x05 // value: the replica record (replica.go), after the entries

	groupPrefixLen = 1 + 8
	stateKeyLen    = groupPrefixLen + 1
	entryKeyLen    = stateKeyLen + 8
	unloadedKeyLen = 1 + 8
)

// FormatVersion is the version of the layout this build writes and reads.
// Version 2 added the replica record (kindReplica); a version-1 log is
// read as it is and becomes version 2 with the first record written.
const FormatVersion = 2

// formatVersionRecord is the first version that may hold replica records.
const formatVersionRecord = 2

var formatVersionKey = []byte{nsMeta, metaFormatVersion}

func groupPrefix(group uint64) []byte {
	return appendGroupPrefix(make([]byte, 0, entryKeyLen), group)
}

// appendGroupPrefix appends the prefix of every key of group to dst.
func appendGroupPrefix(dst []byte, group uint64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, nsGroup), group)
}

// stateKey is the key of one of a group's single values (hard state, conf
// state, truncated state, replica record), or the prefix of its entries
// (kindEntry).
func stateKey(group uint64, kind byte) []byte {
	return append(groupPrefix(group), kind)
}

func entryKey(group, index uint64) []byte {
	return appendEntryKey(make([]byte, 0, entryKeyLen), group, index)
}

// appendEntryKey appends the key of a group's entry to dst.
func appendEntryKey(dst []byte, group, index uint64) []byte {
	return binary.BigEndian.AppendUint64(append(appendGroupPrefix(dst, group), kindEntry), index)
}

// groupUpperBound is the first key after every key of group, or the end
// of the group namespace for the last possible group.
func groupUpperBound(group uint64) []byte {
	if group == ^uint64(0) {
		return []byte{nsGroup + 1}
	}
	return groupPrefix(group + 1)
}

// entryIndex parses the key of an entry of group.
func entryIndex(group uint64, key []byte) (uint64, error) {
	if len(key) != entryKeyLen || key[0] != nsGroup || binary.BigEndian.Uint64(key[1:]) != group || key[groupPrefixLen] != kindEntry {
		return 0, fmt.Errorf("raftlog: group %d: %w: malformed entry key %x", group, lsm.ErrCorruption, key)
	}
	return binary.BigEndian.Uint64(key[stateKeyLen:]), nil
}
