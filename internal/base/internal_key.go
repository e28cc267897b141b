// Package base holds the definitions every engine package shares: the
// internal key (a user key plus a sequence-number/kind trailer), its
// ordering, and the internal iterator interface that memtables, sstables and
// the merging iterator all implement.
//
// It imports nothing from the engine, so every engine package may import it.
package base

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// SeqNum is a 56-bit sequence number. Every key written to the engine is
// stamped with the sequence number of its batch (plus its index within the
// batch), and a read at sequence number S sees exactly the writes with
// sequence numbers below or equal to S.
type SeqNum uint64

// SeqNumMax is the largest valid sequence number. Seeking with it positions
// before every version of a user key.
const SeqNumMax SeqNum = 1<<56 - 1

// Kind says what an internal key records.
type Kind uint8

// The kinds an internal key can have. The numeric values are part of the
// on-disk formats (WAL records, sstable keys) and never change.
const (
	KindDelete Kind = 0
	KindSet    Kind = 1

	// KindMax is the largest kind. Because trailers of equal sequence
	// numbers sort by descending kind, a search key with KindMax sorts
	// before every real key with the same user key and sequence number.
	KindMax = KindSet
)

func (k Kind) String() string {
	switch k {
	case KindDelete:
		return "DEL"
	case KindSet:
		return "SET"
	}
	return fmt.Sprintf("KIND(%d)", uint8(k))
}

// TrailerLen is the size of an encoded trailer.
const TrailerLen = 8

// Trailer packs a sequence number and a kind as seq<<8 | kind.
type Trailer uint64

// MakeTrailer packs seq and kind into a trailer.
func MakeTrailer(seq SeqNum, kind Kind) Trailer {
	return Trailer(uint64(seq)<<8 | uint64(kind))
}

// SeqNum returns the trailer's sequence number.
func (t Trailer) SeqNum() SeqNum { return SeqNum(t >> 8) }

// Kind returns the trailer's kind.
func (t Trailer) Kind() Kind { return Kind(t & 0xff) }

// InternalKey is a user key and the trailer that says which write made it.
// It is kept as a struct in memory and encoded only where bytes are stored
// (memtable arena, sstable blocks, WAL records).
type InternalKey struct {
	UserKey []byte
	Trailer Trailer
}

// MakeInternalKey returns the internal key for userKey written at seq with kind.
func MakeInternalKey(userKey []byte, seq SeqNum, kind Kind) InternalKey {
	return InternalKey{UserKey: userKey, Trailer: MakeTrailer(seq, kind)}
}

// MakeSearchKey returns the internal key that sorts before every version of
// userKey visible at seq: seeking to it finds the newest such version.
func MakeSearchKey(userKey []byte, seq SeqNum) InternalKey {
	return MakeInternalKey(userKey, seq, KindMax)
}

// SeqNum returns the key's sequence number.
func (k InternalKey) SeqNum() SeqNum { return k.Trailer.SeqNum() }

// Kind returns the key's kind.
func (k InternalKey) Kind() Kind { return k.Trailer.Kind() }

// Size is the length of the key's encoding.
func (k InternalKey) Size() int { return len(k.UserKey) + TrailerLen }

// Encode writes the key into buf, which must hold at least k.Size() bytes:
// the user key followed by the trailer as a little-endian uint64.
func (k InternalKey) Encode(buf []byte) {
	n := copy(buf, k.UserKey)
	binary.LittleEndian.PutUint64(buf[n:], uint64(k.Trailer))
}

// AppendEncoded appends the key's encoding to dst.
func (k InternalKey) AppendEncoded(dst []byte) []byte {
	dst = append(dst, k.UserKey...)
	return binary.LittleEndian.AppendUint64(dst, uint64(k.Trailer))
}

// Clone returns a copy of the key that does not alias the original's bytes.
func (k InternalKey) Clone() InternalKey {
	return InternalKey{UserKey: append([]byte(nil), k.UserKey...), Trailer: k.Trailer}
}

func (k InternalKey) String() string {
	return fmt.Sprintf("%q#%d,%s", k.UserKey, k.SeqNum(), k.Kind())
}

// DecodeInternalKey splits an encoded internal key. The returned user key
// aliases b. ok is false when b is shorter than a trailer.
func DecodeInternalKey(b []byte) (key InternalKey, ok bool) {
	n := len(b) - TrailerLen
	if n < 0 {
		return InternalKey{}, false
	}
	return InternalKey{UserKey: b[:n:n], Trailer: Trailer(binary.LittleEndian.Uint64(b[n:]))}, true
}

// InternalCompare orders internal keys: ascending by user key (bytewise),
// then descending by trailer, so that for one user key the newest version
// comes first.
func InternalCompare(a, b InternalKey) int {
	if c := bytes.Compare(a.UserKey, b.UserKey); c != 0 {
		return c
	}
	switch {
	case a.Trailer > b.Trailer:
		return -1
	case a.Trailer < b.Trailer:
		return 1
	}
	return 0
}
