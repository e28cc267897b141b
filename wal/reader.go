package wal

import (
	"errors"
	"fmt"
	"io"

	"github.com/tabuladb/tabula/internal/base"
)

// Reader reads the records of a log in order. It is used by one goroutine
// at a time.
type Reader struct {
	f    io.ReaderAt
	size int64
	// l is the file's chunk layout; guess says it is to be decided from
	// the file's first chunk (NewRecyclableReader).
	l     layout
	guess bool

	// buf holds the bytes of the block at blockOff that are present in the
	// file: BlockSize of them except in the file's last block.
	buf      []byte
	blockOff int64
	// pos is where the next chunk starts in buf.
	pos int

	// rec assembles a record split over several chunks.
	rec []byte
	// end is the offset just past the last complete record returned.
	end int64
	// maxSync is the largest sync offset carried by a valid chunk so far.
	maxSync int64
	// err is sticky: io.EOF, a corruption or a read failure.
	err  error
	torn bool
	// tornOff and tornWhy say where and what the damage ending a torn
	// log was; badEnd, where the damaged chunk ends by its length;
	// oursAfter, that a valid chunk of the log lies past it.
	tornOff   int64
	tornWhy   string
	badEnd    int64
	oursAfter bool
}

// NewReader returns a Reader over the first size bytes of f, a log of
// version 1 chunks (WriterOptions.LogNum unset).
func NewReader(f io.ReaderAt, size int64) *Reader {
	return &Reader{
		f:        f,
		size:     max(size, 0),
		buf:      make([]byte, 0, BlockSize),
		blockOff: -BlockSize,
		pos:      BlockSize,
	}
}

// NewRecyclableReader returns a Reader over the first size bytes of f,
// the file of log logNum (WriterOptions.LogNum), which may have held
// another log before: the log ends where that one's chunks begin. A file
// written in version 1 chunks (its first chunk says so) is read as
// NewReader reads it.
func NewRecyclableReader(f io.ReaderAt, size int64, logNum uint64) *Reader {
	r := NewReader(f, size)
	r.l = layout{recyclable: true, logNum: uint32(logNum)}
	r.guess = true
	return r
}

// Next returns the next record, valid until the next call. At the end of
// the log, whether a clean end or a torn tail (see TornTail), it returns
// io.EOF. Damage to data the writer had synced returns an error wrapping
// base.ErrCorruption that names the offset. Errors are sticky.
func (r *Reader) Next() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	rec, err := r.next()
	if err != nil {
		r.err = err
		return nil, err
	}
	return rec, nil
}

// TornTail reports, after Next returned io.EOF, whether the log ended with
// a torn tail (a partly written record or damaged chunk in data that was
// never synced, which the reader dropped), and the offset at which the
// intact prefix of the log ends: just past the last complete record.
func (r *Reader) TornTail() (torn bool, offset int64) {
	return r.torn, r.end
}

// Offset is the offset just past the last complete record Next
// returned (0 before the first): where the next record starts, so a
// caller can name the record a failing Next was reading.
func (r *Reader) Offset() int64 { return r.end }

// TornDamage describes, after TornTail reported a torn tail, the damage
// that ends the log: its offset, what was found there, and whether it is
// the kind a crash leaves behind (the file ending inside a chunk or a
// record, or a zero-filled chunk header; in a file of recyclable chunks
// that goes on past the damage with no chunk of the log, so perhaps a
// reused one, also a chunk whose write stopped part way over an older
// log's bytes, which fails its checksum, and a record whose next chunk is
// the older log's). A false cut means an intact-looking chunk whose
// checksum, type or sync offset is wrong, or damage with chunks of the
// log after it: recovery drops it all the same, as it cannot tell such a
// chunk from an unsynced torn write, but a strict checker (tabula verify)
// reports it.
func (r *Reader) TornDamage() (offset int64, why string, cut bool) {
	switch r.tornWhy {
	case string(problemTruncHeader), string(problemZeroHeader), string(problemTruncated), whyLastChunkMissing:
		cut = true
	case string(problemChecksum), whyForeignInRecord:
		// A crash's torn write over an older log's bytes: the last the
		// log wrote (no chunk of it comes after), and not at the end of
		// the file (the older bytes go on past it).
		cut = r.l.recyclable && !r.oursAfter && r.badEnd < r.size
	}
	return r.tornOff, r.tornWhy, cut
}

// whyLastChunkMissing is the damage of a file ending inside a record.
const whyLastChunkMissing = "record's last chunk missing at end of file"

// whyForeignInRecord is the damage of a record whose next chunk is
// another log's: the rest of the record never reached the reused file.
const whyForeignInRecord = "record's next chunk is another log's"

func (r *Reader) next() ([]byte, error) {
	r.rec = r.rec[:0]
	inRecord := false
	for {
		hs := r.l.headerSize()
		if r.pos+hs > BlockSize {
			// Either the block is used up or only its zero-filled
			// trailer is left: the next chunk starts the next block.
			if err := r.loadBlock(r.blockOff + BlockSize); err != nil {
				return nil, err
			}
			r.pos = 0
			hs = r.l.headerSize() // decided by the first block
		}
		off := r.blockOff + int64(r.pos)
		if r.pos == len(r.buf) {
			if inRecord {
				return nil, r.bad(off, whyLastChunkMissing)
			}
			return nil, io.EOF
		}
		if r.l.recyclable {
			// Where a record of this log could start, bytes that are not
			// one of its chunks, or too few for a header, are where what
			// it wrote ends in a reused file (whose older log they are);
			// inside a record they are a torn write.
			short := r.pos+hs > len(r.buf)
			switch {
			case !inRecord && (short || r.l.foreign(r.buf[r.pos:])):
				return nil, r.foreignEnd(off)
			case inRecord && !short && r.l.foreign(r.buf[r.pos:]):
				r.badEnd = off
				return nil, r.bad(off, whyForeignInRecord)
			}
		}
		h, problem := r.l.checkChunk(r.buf, r.pos, r.blockOff)
		if problem != problemNone {
			r.badEnd = off + int64(hs+h.length)
			return nil, r.bad(off, string(problem))
		}
		payload := r.buf[r.pos+hs : r.pos+hs+h.length]
		switch {
		case h.typ == chunkFull && !inRecord:
			r.advance(h)
			r.end = off + int64(hs+h.length)
			return payload, nil
		case h.typ == chunkFirst && !inRecord:
			inRecord = true
			r.rec = append(r.rec, payload...)
			r.advance(h)
		case h.typ == chunkMiddle && inRecord:
			r.rec = append(r.rec, payload...)
			r.advance(h)
		case h.typ == chunkLast && inRecord:
			r.rec = append(r.rec, payload...)
			r.advance(h)
			r.end = off + int64(hs+h.length)
			return r.rec, nil
		default:
			// A valid chunk out of sequence: the writer never produces
			// this, but it is judged like any other damage.
			return nil, r.bad(off, fmt.Sprintf("chunk of type %d out of sequence", h.typ))
		}
	}
}

// advance moves past the valid chunk h at r.pos.
func (r *Reader) advance(h chunkHeader) {
	r.maxSync = max(r.maxSync, h.syncOffset)
	r.pos += r.l.headerSize() + h.length
}

// loadBlock reads the block at off into r.buf; past the end of the file
// it leaves r.buf empty. The first block decides a recyclable reader's
// layout (layout.forFile).
func (r *Reader) loadBlock(off int64) error {
	r.blockOff = off
	r.buf = r.buf[:0]
	if off >= r.size {
		return nil
	}
	n := int(min(BlockSize, r.size-off))
	got, err := r.f.ReadAt(r.buf[:n], off)
	if got < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("wal: read block at offset %d: %w", off, err)
	}
	r.buf = r.buf[:n]
	if r.guess && off == 0 {
		r.guess = false
		r.l = r.l.forFile(r.buf)
	}
	return nil
}

// whyForeignAmid is the damage of bytes that are no chunk of the log
// where a record could start, with chunks of the log further on.
const whyForeignAmid = "bytes that are not the log's before chunks that are"

// foreignEnd decides what bytes at off that are no chunk of this log,
// where a record of it could start, mean: the end of what the log wrote
// into a reused file, unless a chunk of the log further on says the log
// was synced past the intact prefix (then they replaced durable data:
// corruption), or there are chunks of the log further on at all (then
// they are damage to data never synced: a torn tail, but not one a crash
// leaves).
func (r *Reader) foreignEnd(off int64) error {
	ours, err := r.after(off, string(problemForeign))
	if err != nil {
		return err
	}
	if ours {
		r.torn, r.oursAfter = true, true
		r.tornOff, r.tornWhy = off, whyForeignAmid
	}
	return io.EOF
}

// bad decides what the damage found at off (a bad chunk, or the file
// ending inside a record) means. If any valid chunk says the writer had
// synced the log past the end of the intact prefix, the damaged bytes were
// durable and this is corruption. Otherwise they were never synced: a
// crash tore the tail, the log ends at the intact prefix, and bad returns
// io.EOF.
func (r *Reader) bad(off int64, why string) error {
	ours, err := r.after(off, why)
	if err != nil {
		return err
	}
	r.torn, r.oursAfter = true, ours
	r.tornOff, r.tornWhy = off, why
	return io.EOF
}

// after looks past the damage at off, which why describes: it returns
// the corruption error if a valid chunk of this log says the log was
// synced past the intact prefix (which off ends), a read error if the
// search failed, and otherwise whether any valid chunk of the log lies
// past off.
func (r *Reader) after(off int64, why string) (ours bool, err error) {
	synced, ours, err := r.syncedPast(r.end)
	if err != nil {
		return false, err
	}
	if synced > r.end {
		return true, fmt.Errorf("wal: chunk at offset %d: %s (the log was synced to offset %d, past the intact prefix ending at %d): %w",
			off, why, synced, r.end, base.ErrCorruption)
	}
	return ours, nil
}

// syncedPast looks for a valid chunk carrying a sync offset beyond x: among
// the chunks read so far, then in the rest of the file from the damaged
// chunk on. It returns the first such offset found, or one <= x, and
// whether it met any valid chunk of this log past the damage.
//
// Where the chain of chunks is intact (from the start of every block, and
// from any valid chunk on) the scan follows chunk lengths. Past damage the
// next chunk boundary is unknown, because the damaged length cannot be
// trusted, so the scan tries every byte offset; to keep that cheap and
// hard to fool, a candidate is only checksummed if its header is
// plausible: a valid type, a length that fits, and a sync offset no larger
// than its own offset.
func (r *Reader) syncedPast(x int64) (synced int64, ours bool, err error) {
	if r.maxSync > x {
		return r.maxSync, true, nil
	}
	s, ours := r.l.scanForSync(r.buf, r.pos, r.blockOff, x)
	for off := r.blockOff + BlockSize; s <= x && off < r.size; off += BlockSize {
		if err := r.loadBlock(off); err != nil {
			return 0, false, err
		}
		var more bool
		s, more = r.l.scanForSync(r.buf, 0, off, x)
		ours = ours || more
	}
	return max(s, x), ours, nil
}

// scanForSync scans block[pos:], where a chunk starts at pos, for a valid
// chunk of this log whose sync offset exceeds x, and returns that offset
// (or 0), and whether it met any valid chunk of this log. Another log's
// chunks, which a reused file holds past what this log wrote, are never
// evidence, but the scan follows their chain as it does its own log's: it
// checksums them rather than trying every byte of an older log's
// megabytes.
func (l layout) scanForSync(block []byte, pos int, blockOff int64, x int64) (synced int64, ours bool) {
	hs := l.headerSize()
	chained := true
	for pos+hs <= len(block) && pos+hs <= BlockSize {
		if !chained {
			// Test the type byte alone first: it rejects almost every
			// offset, and this loop may run over a whole block. It is
			// never 0, so a run of zeros (the zeros a log writes ahead
			// of its end fill most of what this scans) is skipped at
			// once.
			switch typ := block[pos+typeOffset]; {
			case typ == 0:
				pos = zeroRunEnd(block[:min(len(block), BlockSize)], pos+typeOffset) - typeOffset
				continue
			case !l.validType(typ):
				pos++
				continue
			}
			h := l.decodeHeader(block[pos:])
			plausible := pos+hs+h.length <= len(block) &&
				h.syncOffset >= 0 && h.syncOffset <= blockOff+int64(pos)
			if !plausible {
				pos++
				continue
			}
		}
		h, problem := l.checkChunk(block, pos, blockOff)
		switch problem {
		case problemNone:
			if h.syncOffset > x {
				return h.syncOffset, true
			}
			ours = true
		case problemForeign:
		default:
			chained = false
			pos++
			continue
		}
		chained = true
		pos += hs + h.length
	}
	return 0, ours
}
