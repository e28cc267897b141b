package partition

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/odata"
)

// This file holds the span snapshot stream (docs/snapshot.md, "Span
// snapshots"): its writing, and its reading and checking, which an
// ingest and a check without one share.

// WriteTo streams the view. It returns the bytes written.
func (ss *SpanSnapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &checksumWriter{w: bufio.NewWriterSize(w, 256<<10), h: xxhash.New()}
	buf := appendSpanHeader(nil, ss.span, ss.group, ss.applied, ss.merged)
	cw.Write(buf)

	lo, hi := spanBounds(ss.prefix, ss.span)
	it := ss.snap.NewIter(&lsm.IterOptions{LowerBound: lo, UpperBound: hi})
	var count uint64
	var walkErr error
	for ok := it.First(); ok && cw.err == nil; ok = it.Next() {
		pk, rk, err := splitEntitySuffix(it.Key()[len(ss.prefix):])
		if err != nil {
			walkErr = fmt.Errorf("partition: span snapshot: entity key %x: %w", it.Key(), err)
			break
		}
		buf = append(buf[:0], spanRecordEntity)
		buf = appendSpanBytes(buf, pk)
		buf = appendSpanBytes(buf, rk)
		buf = binary.AppendUvarint(buf, uint64(len(it.Value())))
		cw.Write(buf)
		cw.Write(it.Value())
		count++
	}
	if err := errors.Join(walkErr, it.Close()); err != nil {
		return cw.n, fmt.Errorf("partition: span snapshot: %w", err)
	}
	buf = append(buf[:0], spanRecordEnd)
	buf = binary.BigEndian.AppendUint64(buf, count)
	cw.Write(buf)
	var sum [8]byte
	binary.BigEndian.PutUint64(sum[:], cw.h.Sum64())
	if cw.err == nil {
		// Not summed: it is the sum.
		n, err := cw.w.Write(sum[:])
		cw.n += int64(n)
		cw.err = err
	}
	if cw.err == nil {
		cw.err = cw.w.(*bufio.Writer).Flush()
	}
	return cw.n, cw.err
}

// appendSpanHeader appends the header of a span stream: the magic, the
// span, the group and its applied index, and (version 2) the groups the
// span merged.
func appendSpanHeader(dst []byte, sp Span, group, applied uint64, merged []uint64) []byte {
	if len(merged) > 0 {
		dst = append(dst, spanSnapshotMergedMagic...)
	} else {
		dst = append(dst, spanSnapshotMagic...)
	}
	for _, s := range []string{sp.Account, sp.Table, sp.LowPartitionKey, sp.HighPartitionKey} {
		dst = appendSpanString(dst, s)
	}
	dst = binary.BigEndian.AppendUint64(dst, group)
	dst = binary.BigEndian.AppendUint64(dst, applied)
	if len(merged) > 0 {
		dst = appendGroupIDs(dst, merged)
	}
	return dst
}

// EmptySpanStream returns the stream of span sp of group holding no
// entity, at applied index 0: ingested, it empties the span and resets
// the group's applied index, for a replica that must take the group's
// data from its peers.
func EmptySpanStream(group uint64, sp Span) []byte {
	b := appendSpanHeader(nil, sp, group, 0, nil)
	b = append(b, spanRecordEnd)
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint64(b, xxhash.Sum64(b))
}

func appendSpanString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendSpanBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// CheckSpanSnapshot reads a span snapshot stream of span sp of group to
// its end and checks it as IngestSpan would, writing nothing: a replica
// that keeps a fetched stream to ingest later refuses a bad one at once.
// It returns the stream's applied index.
func CheckSpanSnapshot(group uint64, sp Span, r io.Reader) (uint64, error) {
	if err := sp.check(); err != nil {
		return 0, err
	}
	h, err := readSpanStream(group, sp, false, r, nil)
	return h.applied, err
}

// CheckSpanSnapshotOf is CheckSpanSnapshot for a stream of any span of
// table account/table: a follower takes the span its leader sends, which
// the group's log may have split since the follower's own. It returns
// the stream's span and applied index.
func CheckSpanSnapshotOf(group uint64, account, table string, r io.Reader) (Span, uint64, error) {
	h, err := readSpanStream(group, Span{Account: account, Table: table}, true, r, nil)
	return h.span, h.applied, err
}

// spanHeader is what a span stream says besides its entities.
type spanHeader struct {
	span    Span
	applied uint64
	merged  []uint64 // the groups the span merged (version 2)
}

// readSpanStream reads and checks a span stream of want (of want's table
// alone, with anyBounds) and group, handing each entity to put (when not
// nil) under its staged key, in key order; it returns the stream's
// header.
func readSpanStream(group uint64, want Span, anyBounds bool, r io.Reader, put func(key, val []byte) error) (spanHeader, error) {
	sr := &summingReader{r: bufio.NewReaderSize(r, 256<<10), h: xxhash.New()}
	magic := make([]byte, len(spanSnapshotMagic))
	if err := sr.readFull(magic); err != nil || string(magic) != string(spanSnapshotMagic) && string(magic) != string(spanSnapshotMergedMagic) {
		return spanHeader{}, fmt.Errorf("%w: no span snapshot header", ErrBadSpanSnapshot)
	}
	var got Span
	for _, dst := range []*string{&got.Account, &got.Table, &got.LowPartitionKey, &got.HighPartitionKey} {
		b, err := sr.spanBytes(maxSnapshotKey, nil)
		if err != nil {
			return spanHeader{}, fmt.Errorf("%w: cut or damaged header", ErrBadSpanSnapshot)
		}
		*dst = string(b)
	}
	var nums [16]byte
	if err := sr.readFull(nums[:]); err != nil {
		return spanHeader{}, fmt.Errorf("%w: cut header", ErrBadSpanSnapshot)
	}
	gotGroup, applied := binary.BigEndian.Uint64(nums[:8]), binary.BigEndian.Uint64(nums[8:])
	var merged []uint64
	if string(magic) == string(spanSnapshotMergedMagic) {
		var err error
		if merged, err = readGroupIDs(sr); err != nil {
			return spanHeader{}, fmt.Errorf("%w: the merged groups: %v", ErrBadSpanSnapshot, err)
		}
	}
	if anyBounds {
		want.LowPartitionKey, want.HighPartitionKey = got.LowPartitionKey, got.HighPartitionKey
	}
	if err := got.check(); err != nil || !got.same(want) || gotGroup != group {
		return spanHeader{}, fmt.Errorf("%w: the stream is of group %d, span [%q, %q) of %s/%s; want group %d, span [%q, %q) of %s/%s",
			ErrBadSpanSnapshot, gotGroup, got.LowPartitionKey, got.HighPartitionKey, got.Account, got.Table,
			group, want.LowPartitionKey, want.HighPartitionKey, want.Account, want.Table)
	}

	prefix := stagedPrefix(group)
	var (
		count       uint64
		key, last   []byte
		pk, rk, val []byte
		err         error
	)
	for {
		tag, err := sr.ReadByte()
		if err != nil {
			return spanHeader{}, fmt.Errorf("%w: cut after %d entities: %v", ErrBadSpanSnapshot, count, err)
		}
		if tag == spanRecordEnd {
			break
		}
		if tag != spanRecordEntity {
			return spanHeader{}, fmt.Errorf("%w: entity %d: unknown record 0x%02x", ErrBadSpanSnapshot, count, tag)
		}
		if pk, err = sr.spanBytes(maxSnapshotKey, pk); err != nil {
			return spanHeader{}, fmt.Errorf("%w: entity %d: cut or damaged PartitionKey", ErrBadSpanSnapshot, count)
		}
		if rk, err = sr.spanBytes(maxSnapshotKey, rk); err != nil {
			return spanHeader{}, fmt.Errorf("%w: entity %d: cut or damaged RowKey", ErrBadSpanSnapshot, count)
		}
		if val, err = sr.spanBytes(maxSnapshotValue, val); err != nil {
			return spanHeader{}, fmt.Errorf("%w: entity %d: cut or damaged value", ErrBadSpanSnapshot, count)
		}
		if !want.Contains(string(pk)) {
			return spanHeader{}, fmt.Errorf("%w: entity %d: PartitionKey %q is outside the span", ErrBadSpanSnapshot, count, pk)
		}
		// The staged key orders exactly as (pk, rk) does (keys.md).
		key = appendEscaped(appendEscaped(append(key[:0], prefix...), string(pk)), string(rk))
		if last != nil && string(key) <= string(last) {
			return spanHeader{}, fmt.Errorf("%w: entity %d (%q, %q) is out of key order", ErrBadSpanSnapshot, count, pk, rk)
		}
		last = append(last[:0], key...)
		// A value the table service could not read back would pass the
		// checksum if the sender stored it so: refuse it here rather than
		// serve it.
		if _, _, err := odata.DecodeEncoded(val); err != nil {
			return spanHeader{}, fmt.Errorf("%w: entity %d (%q, %q): %v", ErrBadSpanSnapshot, count, pk, rk, err)
		}
		if put != nil {
			if err := put(key, val); err != nil {
				return spanHeader{}, err
			}
		}
		count++
	}
	var n [8]byte
	if err = sr.readFull(n[:]); err != nil || binary.BigEndian.Uint64(n[:]) != count {
		return spanHeader{}, fmt.Errorf("%w: the stream's count does not match its %d entities", ErrBadSpanSnapshot, count)
	}
	want64 := sr.h.Sum64()
	var sum [8]byte
	if _, err := io.ReadFull(sr.r, sum[:]); err != nil || binary.BigEndian.Uint64(sum[:]) != want64 {
		return spanHeader{}, fmt.Errorf("%w: checksum mismatch", ErrBadSpanSnapshot)
	}
	if _, err := sr.r.ReadByte(); err != io.EOF {
		return spanHeader{}, fmt.Errorf("%w: bytes past the checksum", ErrBadSpanSnapshot)
	}
	return spanHeader{span: got, applied: applied, merged: merged}, nil
}

// ReadByte reads one byte, summed: a summingReader is an io.ByteReader
// (readGroupIDs).
func (s *summingReader) ReadByte() (byte, error) {
	c, err := s.r.ReadByte()
	if err != nil {
		return 0, err
	}
	s.h.Write([]byte{c})
	return c, nil
}

// spanBytes reads a uvarint length of at most limit and that many bytes
// into buf's storage.
func (s *summingReader) spanBytes(limit uint64, buf []byte) ([]byte, error) {
	n, err := s.uvarint()
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("%w: a field of %d bytes", ErrBadSpanSnapshot, n)
	}
	buf = grow(buf, int(n))
	if err := s.readFull(buf); err != nil {
		return nil, err
	}
	return buf, nil
}
