package partition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// The storage key layout (docs/keys.md, layout version 2). Every key starts
// with a namespace byte, so that the catalog, the store's bookkeeping and
// the entities never interleave, and entities sort last. Strings are escaped
// (escape) so that comparing encoded keys byte-wise orders them exactly as
// the tuples of their fields compare, field by field, ordinally.
const (
	// layoutVersion 2 added the group index (metaGroupTable); Open
	// upgrades a store of version 1.
	layoutVersion = 2

	nsMeta     = 0x01 // nsMeta | meta key byte                       -> see meta*
	nsCatalog  = 0x02 // nsCatalog | esc(account) | esc(lower(name))  -> catalog entry
	nsDeleted  = 0x03 // nsDeleted | id                               -> deleted-table record
	nsRanges   = 0x04 // nsRanges | id                                -> range map
	nsACL      = 0x05 // nsACL | id                                   -> stored access policies
	nsProps    = 0x06 // nsProps | esc(account)                       -> service properties
	nsStaged   = 0x07 // nsStaged | group | esc(pk) | esc(rk)          -> entity staged by a span ingest
	nsEntities = 0x10 // nsEntities | esc(account) | id | esc(pk) | esc(rk) -> entity
)

// Keys of the nsMeta namespace.
const (
	metaLayout  = 0x01 // uvarint layout version
	metaNextID  = 0x02 // 8-byte big-endian next table id
	metaClock   = 0x03 // 8-byte big-endian clock lease (ticks)
	metaRunning = 0x04 // present while a Store has the directory open
	metaApplied = 0x05 // legacy: 8-byte big-endian applied index of group 1 (see readAppliedIndex)
	// metaGroupApplied | group -> 8-byte big-endian index of the last
	// command of that raft group applied.
	metaGroupApplied = 0x06
	// metaSpanIngest | group -> a span ingest of that group whose staged
	// pairs checked out and are being moved into place (span_snapshot.go).
	metaSpanIngest = 0x07
	// metaGroupSpan | group -> the PartitionKeys that raft group holds of
	// its table, as its own log last set them (group_span.go).
	metaGroupSpan = 0x08
	// metaNodeDown | node -> since when a cluster node has been silent, as
	// the system group recorded it (node_liveness.go).
	metaNodeDown = 0x09
	// metaGroupTable | group -> the catalog key of the table whose entry
	// names that range group (table_cache.go): the group index.
	metaGroupTable = 0x0a
)

// legacyAppliedGroup is the group whose applied index a store written
// before indexes were kept per group holds under metaKey(metaApplied):
// the single group a cluster had then.
const legacyAppliedGroup = 1

// idLen is the width of a table id in keys: fixed, big-endian, so that ids
// sort numerically and a key can be parsed without a length.
const idLen = 8

// errBadKey is wrapped by every key decoding failure.
var errBadKey = errors.New("partition: malformed storage key")

// appendEscaped appends s escaped for a key: 0x00 becomes 0x00 0xFF and the
// string ends with 0x00 0x01. A terminator sorts before every escaped byte,
// so a string sorts before its extensions, and no escaped string is a prefix
// of another, so the fields after it never influence the order.
func appendEscaped(dst []byte, s string) []byte {
	for {
		i := strings.IndexByte(s, 0)
		if i < 0 {
			break
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, 0x00, 0xFF)
		s = s[i+1:]
	}
	dst = append(dst, s...)
	return append(dst, 0x00, 0x01)
}

// skipEscaped returns the offset just past the escaped string that starts at
// b[off], or -1 if there is no well-formed one.
func skipEscaped(b []byte, off int) int {
	for off < len(b) {
		i := bytes.IndexByte(b[off:], 0)
		if i < 0 || off+i+1 >= len(b) {
			return -1
		}
		off += i + 1
		switch b[off] {
		case 0x01:
			return off + 1
		case 0xFF:
			off++
		default:
			return -1
		}
	}
	return -1
}

// readEscaped decodes the escaped string at b[off]. When the string holds
// no escaped 0x00 (always so for keys, which forbid control characters) the
// result aliases b; otherwise it is written to buf. It returns the offset
// after the terminator, or -1.
func readEscaped(b []byte, off int, buf []byte) ([]byte, int) {
	i := bytes.IndexByte(b[off:], 0)
	if i >= 0 && off+i+1 < len(b) && b[off+i+1] == 0x01 {
		return b[off : off+i], off + i + 2
	}
	out := buf[:0]
	for off < len(b) {
		i := bytes.IndexByte(b[off:], 0)
		if i < 0 || off+i+1 >= len(b) {
			return nil, -1
		}
		out = append(out, b[off:off+i]...)
		off += i + 1
		switch b[off] {
		case 0x01:
			return out, off + 1
		case 0xFF:
			out = append(out, 0x00)
			off++
		default:
			return nil, -1
		}
	}
	return nil, -1
}

// EntityKey is the decoded form of an entity's storage key: the clustered
// index tuple (account, table id, PartitionKey, RowKey).
type EntityKey struct {
	Account      string
	TableID      uint64
	PartitionKey string
	RowKey       string
}

// AppendEntityKey appends the storage key of an entity (docs/keys.md):
// 0x10 | esc(account) | table id (8 bytes big-endian) | esc(pk) | esc(rk).
// Keys compare byte-wise exactly as the tuples compare field by field.
func AppendEntityKey(dst []byte, account string, tableID uint64, pk, rk string) []byte {
	dst = appendTablePrefix(dst, account, tableID)
	dst = appendEscaped(dst, pk)
	return appendEscaped(dst, rk)
}

// DecodeEntityKey parses a key made by AppendEntityKey. Anything else,
// including a key with trailing bytes, is an error.
func DecodeEntityKey(key []byte) (EntityKey, error) {
	var k EntityKey
	if len(key) == 0 || key[0] != nsEntities {
		return k, fmt.Errorf("%w: not an entity key", errBadKey)
	}
	var scratch []byte
	acct, off := readEscaped(key, 1, scratch)
	if off < 0 || off+idLen > len(key) {
		return k, fmt.Errorf("%w: bad account or table id", errBadKey)
	}
	k.Account = string(acct)
	k.TableID = binary.BigEndian.Uint64(key[off:])
	off += idLen
	pk, off := readEscaped(key, off, scratch)
	if off < 0 {
		return k, fmt.Errorf("%w: bad PartitionKey", errBadKey)
	}
	k.PartitionKey = string(pk)
	rk, off := readEscaped(key, off, scratch)
	if off < 0 {
		return k, fmt.Errorf("%w: bad RowKey", errBadKey)
	}
	if off != len(key) {
		return k, fmt.Errorf("%w: trailing bytes", errBadKey)
	}
	k.RowKey = string(rk)
	return k, nil
}

// appendTablePrefix appends the prefix shared by all of a table's entities.
func appendTablePrefix(dst []byte, account string, tableID uint64) []byte {
	dst = append(dst, nsEntities)
	dst = appendEscaped(dst, account)
	return binary.BigEndian.AppendUint64(dst, tableID)
}

// PrefixLen is the store's lsm.Options.Split: the length of an entity key's
// prefix up to and including its escaped PartitionKey, so that sstable
// prefix filters hold (account, table, PartitionKey) and a scan of one
// partition skips sstables that cannot hold it. Keys of other namespaces
// and malformed keys have an empty prefix. As lsm requires,
// PrefixLen(key[:PrefixLen(key)]) == PrefixLen(key) for every key.
func PrefixLen(key []byte) int {
	if len(key) == 0 || key[0] != nsEntities {
		return 0
	}
	off := skipEscaped(key, 1)
	if off < 0 || off+idLen > len(key) {
		return 0
	}
	off = skipEscaped(key, off+idLen)
	if off < 0 {
		return 0
	}
	return off
}

// entityTableID returns the table id of a key of a namespace keyed by table
// id (entities, range maps, ACLs), for DropKey.
func entityTableID(key []byte) (uint64, bool) {
	if len(key) == 0 {
		return 0, false
	}
	switch key[0] {
	case nsEntities:
		off := skipEscaped(key, 1)
		if off < 0 || off+idLen > len(key) {
			return 0, false
		}
		return binary.BigEndian.Uint64(key[off:]), true
	case nsRanges, nsACL:
		if len(key) != 1+idLen {
			return 0, false
		}
		return binary.BigEndian.Uint64(key[1:]), true
	}
	return 0, false
}

// prefixSuccessor returns the smallest key greater than every key starting
// with p (nil when p is all 0xFF, which no key prefix of ours is).
func prefixSuccessor(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xFF {
			s := append([]byte(nil), p[:i+1]...)
			s[i]++
			return s
		}
	}
	return nil
}

// Keys of the other namespaces.

func metaKey(k byte) []byte { return []byte{nsMeta, k} }

// groupMetaKey is a meta key kept per raft group: nsMeta | k | group.
func groupMetaKey(k byte, group uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{nsMeta, k}, group)
}

func catalogPrefix(account string) []byte {
	return appendEscaped([]byte{nsCatalog}, account)
}

func catalogKey(account, lowerName string) []byte {
	return appendEscaped(catalogPrefix(account), lowerName)
}

func idKey(ns byte, id uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{ns}, id)
}

func propsKey(account string) []byte {
	return appendEscaped([]byte{nsProps}, account)
}

// decodeCatalogKey returns the account and lower-case table name of a
// catalog key.
func decodeCatalogKey(key []byte) (account, lower string, err error) {
	if len(key) == 0 || key[0] != nsCatalog {
		return "", "", fmt.Errorf("%w: not a catalog key", errBadKey)
	}
	a, off := readEscaped(key, 1, nil)
	if off < 0 {
		return "", "", fmt.Errorf("%w: bad catalog account", errBadKey)
	}
	account = string(a)
	n, off := readEscaped(key, off, nil)
	if off != len(key) {
		return "", "", fmt.Errorf("%w: bad catalog table name", errBadKey)
	}
	return account, string(n), nil
}
