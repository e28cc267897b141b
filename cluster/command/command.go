// Package command holds the table service's writes as the commands a
// cluster replicates through raft, and their encoding
// (docs/command.md): one command is one write a client asked for, which
// every replica applies to its own partition.Store.
package command

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tabuladb/tabula/odata"
	"github.com/tabuladb/tabula/partition"
)

// Kind is what a command does.
type Kind uint8

// The kinds of command.
const (
	KindApply            Kind = iota + 1 // one entity write: Ops[0]
	KindBatch                            // an entity group transaction: Ops
	KindCreateTable                      // Table
	KindDeleteTable                      // Table
	KindSetACL                           // Table's stored access policies: ACL
	KindSetProperties                    // the account's service properties: Properties
	KindCreateRangeTable                 // Table, with a range group of Voters
	KindSetRangeVoters                   // Table's range group Group is to have Voters
	KindSplitRange                       // Table's range of group Group splits at Key: a new range, its group the entry's index
	KindSplitGroup                       // in range group's log: split its span at Key, the rest to group Group with configuration Voters/Learners
	KindMergeRange                       // Table's range of group Group takes the next range, which starts at Key
	KindFreezeGroup                      // in range group's log: its span takes no more writes, to be merged
	KindMergeGroup                       // in range group's log: take frozen group Group's span, which starts at Key
	KindNodeDown                         // node Node unheard since Since (Unix ns; 0: heard again)
)

func (k Kind) String() string {
	switch k {
	case KindApply:
		return "apply"
	case KindBatch:
		return "batch"
	case KindCreateTable:
		return "create-table"
	case KindDeleteTable:
		return "delete-table"
	case KindSetACL:
		return "set-acl"
	case KindSetProperties:
		return "set-properties"
	case KindCreateRangeTable:
		return "create-range-table"
	case KindSetRangeVoters:
		return "set-range-voters"
	case KindSplitRange:
		return "split-range"
	case KindSplitGroup:
		return "split-group"
	case KindMergeRange:
		return "merge-range"
	case KindFreezeGroup:
		return "freeze-group"
	case KindMergeGroup:
		return "merge-group"
	case KindNodeDown:
		return "node-down"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Command is one replicated write.
type Command struct {
	Kind Kind
	// ID identifies the proposal, so the node that proposed it finds its
	// result when it applies it; 0 when nobody waits.
	ID uint64
	// Timestamp is the first commit timestamp of the entities the command
	// writes, chosen by the leader as the command enters the log (see
	// SetTimestamp); 0 for kinds that write no entity.
	Timestamp  odata.DateTime
	Account    string
	Table      string
	Ops        []partition.Op
	ACL        []partition.SignedIdentifier
	Properties []byte
	// Voters are the nodes a new table's range group is replicated on,
	// chosen by the leader that proposes it; the group's id is the index
	// of the command's entry, unique and the same on every replica. Or,
	// with Group, the nodes a table's range group is to move to.
	Voters []uint64
	Group  uint64
	// Key is a split's PartitionKey; Learners the learners of the child
	// group a split starts (its Voters beside), raft ids of the parent's
	// members.
	Key      string
	Learners []uint64
	// Node is the cluster node a liveness record is of, and Since the
	// Unix nanoseconds it was last heard at (0: it is heard again).
	Node  uint64
	Since int64
}

// version is the first byte of every encoded command.
const version = 1

// timestampOffset is where the 8-byte timestamp sits in an encoding, fixed
// so the leader can stamp an encoded command without re-encoding it.
const timestampOffset = 2

// Limits a decoder holds an encoding to, beyond which it is corrupt: the
// service's own bounds, with room.
const (
	maxOps    = partition.MaxBatchOps
	maxACL    = partition.MaxSignedIdentifiers
	maxString = 4 << 20 // no account, table, key, ETag or property set is near this
)

// ErrCorrupt is wrapped by every decoding failure.
var ErrCorrupt = errors.New("command: corrupt encoding")

// Append appends c's encoding to dst.
func (c *Command) Append(dst []byte) []byte {
	dst = append(dst, version, byte(c.Kind))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(c.Timestamp))
	dst = binary.AppendUvarint(dst, c.ID)
	dst = appendString(dst, c.Account)
	dst = appendString(dst, c.Table)
	switch c.Kind {
	case KindApply, KindBatch:
		dst = binary.AppendUvarint(dst, uint64(len(c.Ops)))
		for i := range c.Ops {
			op := &c.Ops[i]
			dst = append(dst, byte(op.Kind))
			dst = appendString(dst, op.IfMatch)
			var e odata.Entity
			if op.Entity != nil {
				e = *op.Entity
			}
			dst = appendString(dst, e.PartitionKey)
			dst = appendString(dst, e.RowKey)
			dst = appendProperties(dst, e.Properties)
		}
	case KindSetACL:
		dst = binary.AppendUvarint(dst, uint64(len(c.ACL)))
		for _, id := range c.ACL {
			dst = appendString(dst, id.ID)
			dst = appendTime(dst, id.Start)
			dst = appendTime(dst, id.Expiry)
			dst = appendString(dst, id.Permission)
		}
	case KindSetProperties:
		dst = appendBytes(dst, c.Properties)
	case KindCreateRangeTable:
		dst = appendVoters(dst, c.Voters)
	case KindSetRangeVoters:
		dst = binary.AppendUvarint(dst, c.Group)
		dst = appendVoters(dst, c.Voters)
	case KindSplitRange, KindMergeRange, KindMergeGroup:
		dst = binary.AppendUvarint(dst, c.Group)
		dst = appendString(dst, c.Key)
	case KindSplitGroup:
		dst = binary.AppendUvarint(dst, c.Group)
		dst = appendString(dst, c.Key)
		dst = appendVoters(dst, c.Voters)
		dst = binary.AppendUvarint(dst, uint64(len(c.Learners)))
		for _, v := range c.Learners {
			dst = binary.AppendUvarint(dst, v)
		}
	case KindNodeDown:
		dst = binary.AppendUvarint(dst, c.Node)
		dst = binary.AppendVarint(dst, c.Since)
	}
	return dst
}

// ProposalID reads the proposal id of an encoded command without decoding
// the rest; ok is false for an encoding too short to hold one.
func ProposalID(encoded []byte) (id uint64, ok bool) {
	if len(encoded) <= timestampOffset+8 || encoded[0] != version {
		return 0, false
	}
	id, n := binary.Uvarint(encoded[timestampOffset+8:])
	return id, n > 0
}

// SetTimestamp writes ts into an encoded command in place.
func SetTimestamp(encoded []byte, ts odata.DateTime) {
	binary.LittleEndian.PutUint64(encoded[timestampOffset:], uint64(ts))
}

// Decode reads an encoded command. Malformed input is an error wrapping
// ErrCorrupt; it never panics, and allocates in proportion to its input.
func Decode(b []byte) (Command, error) {
	r := reader{b: b}
	var c Command
	if v := r.byte(); v != version {
		if r.err != nil {
			return Command{}, r.err
		}
		return Command{}, fmt.Errorf("%w: version %d, this build reads %d", ErrCorrupt, v, version)
	}
	c.Kind = Kind(r.byte())
	c.Timestamp = odata.DateTime(r.uint64())
	c.ID = r.uvarint()
	c.Account = r.string()
	c.Table = r.string()
	switch c.Kind {
	case KindApply, KindBatch:
		n := r.count(maxOps, 5)
		if r.err == nil && (n == 0 || (c.Kind == KindApply && n != 1)) {
			r.fail("%d operations in a %s command", n, c.Kind)
		}
		c.Ops = make([]partition.Op, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			op := partition.Op{Kind: partition.OpKind(r.byte()), IfMatch: r.string()}
			e := &odata.Entity{PartitionKey: r.string(), RowKey: r.string()}
			props := r.bytes()
			if r.err == nil {
				ts, ps, err := odata.DecodeEncoded(props)
				if err != nil || ts != 0 {
					r.fail("operation %d's properties: %v", i, err)
				}
				e.Properties = ps
			}
			op.Entity = e
			c.Ops = append(c.Ops, op)
		}
	case KindCreateTable, KindDeleteTable, KindFreezeGroup:
	case KindSetACL:
		n := r.count(maxACL, 6)
		c.ACL = make([]partition.SignedIdentifier, 0, n)
		for i := 0; i < n && r.err == nil; i++ {
			c.ACL = append(c.ACL, partition.SignedIdentifier{ID: r.string(), Start: r.time(), Expiry: r.time(), Permission: r.string()})
		}
	case KindSetProperties:
		c.Properties = bytes.Clone(r.bytes())
	case KindCreateRangeTable:
		c.Voters = r.voters()
	case KindSetRangeVoters:
		c.Group = r.rangeGroup()
		c.Voters = r.voters()
	case KindSplitRange, KindSplitGroup, KindMergeRange, KindMergeGroup:
		c.Group = r.rangeGroup()
		if c.Key = r.string(); r.err == nil && c.Key == "" {
			r.fail("a %s at the empty PartitionKey", c.Kind)
		}
		if c.Kind == KindSplitGroup {
			c.Voters = r.voters()
			n := r.count(partition.MaxGroupVoters, 1)
			c.Learners = make([]uint64, 0, n)
			for i := 0; i < n && r.err == nil; i++ {
				c.Learners = append(c.Learners, r.uvarint())
			}
		}
	case KindNodeDown:
		if c.Node = r.uvarint(); r.err == nil && c.Node == 0 {
			r.fail("a liveness record of node 0")
		}
		if c.Since = r.varint(); r.err == nil && c.Since < 0 {
			r.fail("a liveness record at %d", c.Since)
		}
	default:
		r.fail("unknown kind %d", c.Kind)
	}
	if r.err == nil && len(r.b) != r.off {
		r.fail("%d bytes past the end", len(r.b)-r.off)
	}
	if r.err != nil {
		return Command{}, r.err
	}
	return c, nil
}

func appendVoters(dst []byte, voters []uint64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(voters)))
	for _, v := range voters {
		dst = binary.AppendUvarint(dst, v)
	}
	return dst
}

// rangeGroup reads a range group's id: above the system group's.
func (r *reader) rangeGroup() uint64 {
	g := r.uvarint()
	if r.err == nil && g <= 1 {
		r.fail("group %d is not a range group", g)
	}
	return g
}

// voters reads a range group's voters: 1 to partition.MaxGroupVoters
// node ids, none 0.
func (r *reader) voters() []uint64 {
	n := r.count(partition.MaxGroupVoters, 1)
	if r.err == nil && n == 0 {
		r.fail("a range group with no voters")
	}
	voters := make([]uint64, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		v := r.uvarint()
		if r.err == nil && v == 0 {
			r.fail("voter %d is node 0", i)
		}
		voters = append(voters, v)
	}
	return voters
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// appendProperties appends the stored form of props (odata.AppendEncoded)
// as appendBytes would, but encoded in place, with no buffer of its own:
// the length, known only once encoded, is put in front by moving the
// encoding along.
func appendProperties(dst []byte, props []odata.Property) []byte {
	start := len(dst)
	dst = odata.AppendEncoded(dst, 0, props)
	n := len(dst) - start
	var length [binary.MaxVarintLen64]byte
	h := binary.PutUvarint(length[:], uint64(n))
	dst = append(dst, length[:h]...)
	copy(dst[start+h:], dst[start:start+n])
	copy(dst[start:], length[:h])
	return dst
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// appendTime encodes a time as a presence byte, then Unix seconds and
// nanoseconds in UTC: an ACL's times are compared, never shown in a zone.
func appendTime(dst []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = binary.AppendVarint(dst, t.Unix())
	return binary.AppendUvarint(dst, uint64(t.Nanosecond()))
}

// reader decodes; its first failure sticks, and later reads return zero
// values.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at offset %d: %s", ErrCorrupt, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail("truncated")
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *reader) uint64() uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 8 {
		r.fail("truncated")
		return 0
	}
	r.off += 8
	return binary.LittleEndian.Uint64(r.b[r.off-8:])
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

// count reads a count of items, each taking at least minBytes, at most max.
func (r *reader) count(max, minBytes int) int {
	n := r.uvarint()
	if r.err == nil && (n > uint64(max) || n > uint64((len(r.b)-r.off)/minBytes)) {
		r.fail("count %d", n)
		return 0
	}
	return int(n)
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > maxString || n > uint64(len(r.b)-r.off) {
		r.fail("length %d", n)
		return nil
	}
	r.off += int(n)
	return r.b[r.off-int(n) : r.off : r.off]
}

func (r *reader) string() string { return string(r.bytes()) }

func (r *reader) time() time.Time {
	switch r.byte() {
	case 0:
		return time.Time{}
	case 1:
		sec, nsec := r.varint(), r.uvarint()
		if r.err == nil && nsec >= 1e9 {
			r.fail("nanoseconds %d", nsec)
		}
		return time.Unix(sec, int64(nsec)).UTC()
	}
	r.fail("bad time flag")
	return time.Time{}
}
