package sstable

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/internal/base"
)

// VerifyError locates the first damage Verify found in a table.
type VerifyError struct {
	Offset int64 // file offset of the damaged block, footer or gap
	What   string
	Err    error
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("offset %d: %s: %v", e.Offset, e.What, e.Err)
}

func (e *VerifyError) Unwrap() error { return e.Err }

// Summary is what Verify learned about an intact table.
type Summary struct {
	Entries, Blocks         uint64
	First, Last             base.InternalKey // zero for an empty table
	SmallestSeq, LargestSeq base.SeqNum
}

// Verify reads the whole table in f (size bytes) and checks everything
// that can be checked without knowing what it should hold: the footer's
// magic, checksum and version; the checksum and structure of every block;
// that the blocks tile the file with no gap or overlap, so every byte is
// covered by some checksum; that keys strictly increase in internal key
// order within and across blocks, and lie between their index separators;
// that the bloom filter holds every user key; and that the properties
// (entry, deletion and block counts, first and last keys, sequence range)
// agree with the contents. The error, a *VerifyError wrapping
// base.ErrCorruption for damage, names the offset of the first bad part.
func Verify(f ReadableFile, size int64) (Summary, error) {
	var s Summary
	bad := func(off uint64, what string, err error) (Summary, error) {
		return s, &VerifyError{Offset: int64(off), What: what, Err: err}
	}
	if size < footerLen {
		return bad(0, "file", fmt.Errorf("file of %d bytes is too small to be a table: %w", size, base.ErrCorruption))
	}
	footerOff := uint64(size - footerLen)
	buf := make([]byte, footerLen)
	if err := readFull(f, buf, int64(footerOff)); err != nil {
		return bad(footerOff, "footer", err)
	}
	ft, err := decodeFooter(buf, uint64(size))
	if err != nil {
		return bad(footerOff, "footer", err)
	}
	r := &Reader{f: f}

	data, err := r.readBlock(ft.properties, 0)
	if err != nil {
		return bad(ft.properties.offset, "properties block", unwrapBlockErr(err))
	}
	if r.props, err = decodeProperties(data); err != nil {
		return bad(ft.properties.offset, "properties block", err)
	}
	dataEnd := min(ft.index.offset, ft.properties.offset)
	if ft.filter.length > 0 {
		dataEnd = min(dataEnd, ft.filter.offset)
	}
	if data, err = r.readBlock(ft.index, r.props.MaxBlockSize); err != nil {
		return bad(ft.index.offset, "index block", unwrapBlockErr(err))
	}
	if r.index, err = decodeIndex(data, dataEnd); err != nil {
		return bad(ft.index.offset, "index block", err)
	}
	if ft.filter.length > 0 {
		if data, err = r.readBlock(ft.filter, 0); err != nil {
			return bad(ft.filter.offset, "filter block", unwrapBlockErr(err))
		}
		if r.filter, err = decodeFilter(data); err != nil {
			return bad(ft.filter.offset, "filter block", err)
		}
	}

	// Every byte before the footer belongs to exactly one block.
	type span struct {
		what string
		h    blockHandle
	}
	spans := []span{{"index block", ft.index}, {"properties block", ft.properties}}
	if ft.filter.length > 0 {
		spans = append(spans, span{"filter block", ft.filter})
	}
	for i := range r.index.len() {
		spans = append(spans, span{fmt.Sprintf("data block %d", i), r.index.handle(i)})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmpUint(a.h.offset, b.h.offset) })
	var at uint64
	for _, sp := range spans {
		if sp.h.offset != at {
			return bad(min(at, sp.h.offset), sp.what, fmt.Errorf("blocks do not tile the file: %s starts at %d, the previous block ends at %d: %w", sp.what, sp.h.offset, at, base.ErrCorruption))
		}
		at = sp.h.end()
	}
	if at != footerOff {
		return bad(at, "file", fmt.Errorf("the last block ends at %d, the footer starts at %d: %w", at, footerOff, base.ErrCorruption))
	}

	var (
		prev     base.InternalKey
		prevUser []byte
		it       blockIter
		dels     uint64
	)
	for i := range r.index.len() {
		h := r.index.handle(i)
		data, err := r.readBlock(h, r.props.MaxBlockSize)
		if err != nil {
			return bad(h.offset, fmt.Sprintf("data block %d", i), unwrapBlockErr(err))
		}
		if err := it.init(data); err != nil {
			return bad(h.offset, fmt.Sprintf("data block %d", i), err)
		}
		sep := r.index.separator(i, nil)
		n := 0
		for ok := it.first(); ok; ok = it.next() {
			k, ok := base.DecodeInternalKey(it.key)
			if !ok {
				return bad(h.offset, fmt.Sprintf("data block %d", i), fmt.Errorf("entry %d: key too short: %w", n, base.ErrCorruption))
			}
			if s.Entries > 0 && base.InternalCompare(prev, k) >= 0 {
				return bad(h.offset, fmt.Sprintf("data block %d", i), fmt.Errorf("entry %d: key %s does not follow %s: %w", n, k, prev, base.ErrCorruption))
			}
			if base.InternalCompare(k, sep) > 0 {
				return bad(h.offset, fmt.Sprintf("data block %d", i), fmt.Errorf("entry %d: key %s beyond the block's index separator %s: %w", n, k, sep, base.ErrCorruption))
			}
			if s.Entries == 0 {
				s.First = k.Clone()
				s.SmallestSeq, s.LargestSeq = k.SeqNum(), k.SeqNum()
			}
			s.SmallestSeq = min(s.SmallestSeq, k.SeqNum())
			s.LargestSeq = max(s.LargestSeq, k.SeqNum())
			if k.Kind() == base.KindDelete {
				dels++
			}
			if r.filter != nil && (prevUser == nil || !bytes.Equal(prevUser, k.UserKey)) && !r.filter.mayContain(keyHash(k.UserKey)) {
				return bad(ft.filter.offset, "filter block", fmt.Errorf("user key %q of data block %d is missing from the bloom filter: %w", k.UserKey, i, base.ErrCorruption))
			}
			prevUser = append(prevUser[:0], k.UserKey...)
			prev = base.InternalKey{UserKey: append(prev.UserKey[:0], k.UserKey...), Trailer: k.Trailer}
			s.Entries++
			n++
		}
		if it.err != nil {
			return bad(h.offset, fmt.Sprintf("data block %d", i), it.err)
		}
		if n == 0 {
			return bad(h.offset, fmt.Sprintf("data block %d", i), fmt.Errorf("empty data block: %w", base.ErrCorruption))
		}
		s.Blocks++
	}
	if s.Entries > 0 {
		s.Last = prev.Clone()
	}
	p := &r.props
	switch {
	case p.NumEntries != s.Entries || p.NumDeletions != dels:
		return bad(ft.properties.offset, "properties block", fmt.Errorf("properties count %d entries (%d deletions), the blocks hold %d (%d): %w", p.NumEntries, p.NumDeletions, s.Entries, dels, base.ErrCorruption))
	case p.NumDataBlocks != s.Blocks:
		return bad(ft.properties.offset, "properties block", fmt.Errorf("properties count %d data blocks, the index %d: %w", p.NumDataBlocks, s.Blocks, base.ErrCorruption))
	case s.Entries > 0 && (base.InternalCompare(p.Smallest, s.First) != 0 || base.InternalCompare(p.Largest, s.Last) != 0):
		return bad(ft.properties.offset, "properties block", fmt.Errorf("properties give keys %s..%s, the blocks hold %s..%s: %w", p.Smallest, p.Largest, s.First, s.Last, base.ErrCorruption))
	case s.Entries > 0 && (p.SmallestSeq != s.SmallestSeq || p.LargestSeq != s.LargestSeq):
		return bad(ft.properties.offset, "properties block", fmt.Errorf("properties give sequence numbers %d..%d, the blocks hold %d..%d: %w", p.SmallestSeq, p.LargestSeq, s.SmallestSeq, s.LargestSeq, base.ErrCorruption))
	}
	return s, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
