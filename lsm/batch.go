package lsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/memtable"
)

// batchHeaderLen is the size of a batch's header: the sequence number of its
// first operation (uint64) and its operation count (uint32), little-endian.
const batchHeaderLen = 12

// maxBatchSize bounds a batch's encoding so that it fits a memtable arena,
// which addresses its bytes with 32-bit offsets.
const maxBatchSize = 1 << 30

var errBatchTooLarge = errors.New("lsm: batch too large")

// Batch is a sequence of writes applied atomically by DB.Apply. Its encoding
// is also the WAL record (docs/wal.md, "Batch records"):
//
//	header: seqnum uint64 | count uint32
//	then per operation: kind byte | uvarint key length | key
//	                    [| uvarint value length | value]   (sets only)
//
// A Batch is not safe for concurrent use. After Apply it may be Reset and
// reused.
type Batch struct {
	repr []byte
	// count is the number of operations.
	count uint32
	// memSize is the memtable arena space the batch needs.
	memSize int
	// err records the first error met while building (a batch too large);
	// Apply returns it.
	err error
}

// NewBatch returns an empty batch.
func (db *DB) NewBatch() *Batch { return &Batch{} }

func (b *Batch) init() {
	if len(b.repr) < batchHeaderLen {
		b.repr = append(b.repr[:0], make([]byte, batchHeaderLen)...)
	}
}

// Set adds a write of value under key. The batch copies both.
func (b *Batch) Set(key, value []byte) {
	b.add(base.KindSet, key, value)
}

// Delete adds a deletion of key. The batch copies it.
func (b *Batch) Delete(key []byte) {
	b.add(base.KindDelete, key, nil)
}

func (b *Batch) add(kind base.Kind, key, value []byte) {
	b.init()
	if b.err != nil {
		return
	}
	if len(b.repr)+len(key)+len(value)+2*binary.MaxVarintLen32+1 > maxBatchSize || b.count == math.MaxUint32 {
		b.err = fmt.Errorf("%w: more than %d bytes", errBatchTooLarge, maxBatchSize)
		return
	}
	b.repr = append(b.repr, byte(kind))
	b.repr = binary.AppendUvarint(b.repr, uint64(len(key)))
	b.repr = append(b.repr, key...)
	if kind == base.KindSet {
		b.repr = binary.AppendUvarint(b.repr, uint64(len(value)))
		b.repr = append(b.repr, value...)
	}
	b.count++
	b.memSize += memtable.EntrySize(len(key), len(value))
}

// Len returns the number of operations in the batch.
func (b *Batch) Len() int { return int(b.count) }

// Size returns the size of the batch's encoding in bytes.
func (b *Batch) Size() int { return len(b.repr) }

// Reset empties the batch, keeping its buffer for reuse.
func (b *Batch) Reset() {
	b.repr = b.repr[:0]
	b.count = 0
	b.memSize = 0
	b.err = nil
}

func (b *Batch) empty() bool { return b.count == 0 }

// setSeqNum stamps the batch with the sequence number of its first operation.
func (b *Batch) setSeqNum(seq base.SeqNum) {
	binary.LittleEndian.PutUint64(b.repr[0:8], uint64(seq))
	binary.LittleEndian.PutUint32(b.repr[8:12], b.count)
}

// batchReader decodes a batch encoding, from a Batch or a WAL record.
type batchReader struct {
	seq   base.SeqNum
	count uint32
	data  []byte
	index uint32
}

// newBatchReader validates the header of repr.
func newBatchReader(repr []byte) (batchReader, error) {
	if len(repr) < batchHeaderLen {
		return batchReader{}, fmt.Errorf("batch of %d bytes is shorter than its header: %w", len(repr), ErrCorruption)
	}
	r := batchReader{
		seq:   base.SeqNum(binary.LittleEndian.Uint64(repr[0:8])),
		count: binary.LittleEndian.Uint32(repr[8:12]),
		data:  repr[batchHeaderLen:],
	}
	if uint64(r.seq)+uint64(r.count) > uint64(base.SeqNumMax) {
		return batchReader{}, fmt.Errorf("batch sequence number %d+%d out of range: %w", r.seq, r.count, ErrCorruption)
	}
	return r, nil
}

// next returns the batch's next operation with its sequence number. ok is
// false at the end; err reports a malformed encoding (including a count that
// disagrees with the operations present).
func (r *batchReader) next() (key base.InternalKey, value []byte, ok bool, err error) {
	if len(r.data) == 0 {
		if r.index != r.count {
			return key, nil, false, fmt.Errorf("batch holds %d operations, header says %d: %w", r.index, r.count, ErrCorruption)
		}
		return key, nil, false, nil
	}
	if r.index >= r.count {
		return key, nil, false, fmt.Errorf("batch holds more operations than its count %d: %w", r.count, ErrCorruption)
	}
	kind := base.Kind(r.data[0])
	r.data = r.data[1:]
	var userKey []byte
	if userKey, err = r.readBytes(); err != nil {
		return key, nil, false, err
	}
	switch kind {
	case base.KindSet:
		if value, err = r.readBytes(); err != nil {
			return key, nil, false, err
		}
	case base.KindDelete:
	default:
		return key, nil, false, fmt.Errorf("batch operation %d has unknown kind %d: %w", r.index, kind, ErrCorruption)
	}
	key = base.MakeInternalKey(userKey, r.seq+base.SeqNum(r.index), kind)
	r.index++
	return key, value, true, nil
}

func (r *batchReader) readBytes() ([]byte, error) {
	n, w := binary.Uvarint(r.data)
	if w <= 0 || n > uint64(len(r.data)-w) {
		return nil, fmt.Errorf("batch operation %d: bad length: %w", r.index, ErrCorruption)
	}
	b := r.data[w : w+int(n)]
	r.data = r.data[w+int(n):]
	return b, nil
}
