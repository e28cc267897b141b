// Package wal implements the record log that the engine uses for both its
// write-ahead log and its MANIFEST: an append-only file of records, each
// split into checksummed chunks laid out in fixed 32 KiB blocks.
//
// A Writer appends records from the commit path without waiting for the
// disk; a background goroutine hands buffered bytes to the file at once and
// runs fsyncs on behalf of SyncTo callers, so concurrent commits share one
// fsync (group commit). Every chunk records how much of the file the writer
// knew to be durable when it wrote the chunk, which lets a Reader tell a
// torn tail (unsynced data that a crash left half-written: the log simply
// ends there) from corruption of data that had been synced (an error).
//
// The byte layout is specified in docs/wal.md (format version 1).
package wal

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/cespare/xxhash/v2"
)

// FormatVersion is the version of the chunk layout described in
// docs/wal.md. Files carry no header, so the version is implied by the
// file's role (WAL segment or MANIFEST) in a store of a given version.
// Version 2 added recyclable chunks: a log whose files may be reused
// (WriterOptions.LogNum) writes them, and version 1 files read as before.
const FormatVersion = 2

// BlockSize is the size of the blocks a log is laid out in. No chunk
// crosses a block boundary, so a reader can always resume parsing at the
// start of any block.
const BlockSize = 32 << 10

// HeaderSize is the size of a version 1 chunk header:
//
//	checksum   uint64  xxhash64 of bytes [8, 19+length) of the chunk
//	length     uint16  payload length
//	type       uint8   chunkFull, chunkFirst, chunkMiddle or chunkLast
//	syncOffset uint64  file offset known durable when the chunk was written
//
// all little-endian.
const HeaderSize = 19

// RecyclableHeaderSize is the size of a recyclable chunk's header: a
// version 1 header, its type offset by recyclableTypes, followed by
//
//	logNum     uint32  the low 32 bits of the number of the log the chunk
//	                   was written for
//	salt       uint32  a random number the log's writer drew, the same in
//	                   every chunk of the log
//
// which the checksum covers too. A file reused for another log keeps the
// chunks of the log it held until they are overwritten; their number
// tells them apart from the new log's. The salt keeps bytes within the
// older log's records (user data, which may hold anything, a number
// easily guessed included) from passing for the new log's chunks: a
// reader takes it from the log's first chunk, which the writer wrote
// before any record.
const RecyclableHeaderSize = HeaderSize + 8

// typeOffset is where a chunk header's type byte lies.
const typeOffset = 10

// maxPayload is the largest payload one version 1 chunk can carry.
const maxPayload = BlockSize - HeaderSize

// Chunk types. Zero is deliberately invalid so that a zero-filled region
// (a preallocated or never-written page) never parses as a chunk. A
// recyclable chunk's type is one of these plus recyclableTypes.
const (
	chunkFull   = 1
	chunkFirst  = 2
	chunkMiddle = 3
	chunkLast   = 4

	recyclableTypes = 4
)

// layout is how a file's chunks are laid out: version 1 chunks, or
// recyclable ones of the log logNum, with salt when saltKnown (a reader
// learns it from the log's first chunk; without it, no chunk is the
// log's).
type layout struct {
	recyclable bool
	logNum     uint32
	salt       uint32
	saltKnown  bool
}

func (l layout) headerSize() int {
	if l.recyclable {
		return RecyclableHeaderSize
	}
	return HeaderSize
}

// chunkHeader is a decoded chunk header. typ is chunkFull..chunkLast for
// a chunk of the file's layout, whatever its version.
type chunkHeader struct {
	checksum   uint64
	length     int
	typ        byte
	syncOffset int64
	logNum     uint32
	salt       uint32
}

// decodeHeader decodes the header at b, of layout l. A type outside the
// layout's range comes out as 0 (invalid).
func (l layout) decodeHeader(b []byte) chunkHeader {
	_ = b[l.headerSize()-1]
	h := chunkHeader{
		checksum:   binary.LittleEndian.Uint64(b[0:8]),
		length:     int(binary.LittleEndian.Uint16(b[8:10])),
		typ:        b[typeOffset],
		syncOffset: int64(binary.LittleEndian.Uint64(b[11:19])),
	}
	if l.recyclable {
		h.logNum = binary.LittleEndian.Uint32(b[19:23])
		h.salt = binary.LittleEndian.Uint32(b[23:27])
	}
	switch {
	case !l.validType(h.typ):
		h.typ = 0
	case l.recyclable:
		h.typ -= recyclableTypes
	}
	return h
}

// validType reports whether raw, a chunk header's type byte, is a chunk
// type of layout l.
func (l layout) validType(raw byte) bool {
	if l.recyclable {
		raw -= recyclableTypes // below the range it wraps past chunkLast
	}
	return raw >= chunkFull && raw <= chunkLast
}

// foreign reports whether the bytes at b, of a recyclable layout, do not
// even claim to be a chunk of this file's log: no recyclable type, or
// another log's number or salt. Past the end of what the log wrote, a
// reused file holds the chunks of the log it held before (or parts of
// them), which this tells from a damaged chunk of this log's own. The
// caller guarantees len(b) >= RecyclableHeaderSize.
func (l layout) foreign(b []byte) bool {
	h := l.decodeHeader(b)
	return h.typ == 0 || !l.owns(h)
}

// owns reports whether the recyclable chunk header h names this log: its
// number and its salt (none is the log's while the salt is unknown).
func (l layout) owns(h chunkHeader) bool {
	return l.saltKnown && h.logNum == l.logNum && h.salt == l.salt
}

// forFile returns the layout a reader of recyclable log l reads a file in,
// judged by the file's first block b: version 1 chunks if its first chunk
// has a version 1 type; recyclable chunks of the log, with the salt of
// that chunk if it is the log's (its writer wrote it before any record),
// and with none (so no chunk is the log's) if it is another log's; and
// for a first chunk of neither layout's type (damage), version 1 chunks
// if valid ones follow in the block, whose damage they then judge.
func (l layout) forFile(b []byte) layout {
	if len(b) <= 10 {
		return l
	}
	switch t := b[10]; {
	case t >= chunkFull && t <= chunkLast:
		return layout{}
	case t > recyclableTypes && t <= recyclableTypes+chunkLast:
		if len(b) >= RecyclableHeaderSize {
			if h := l.decodeHeader(b); h.logNum == l.logNum {
				l.salt, l.saltKnown = h.salt, true
			}
		}
		return l
	}
	if _, v1 := (layout{}).scanForSync(b, 0, 0, math.MaxInt64); v1 {
		return layout{}
	}
	return l
}

// putChunk encodes a chunk header of layout l in b[:l.headerSize()] for
// the payload that the caller has already placed after it, then fills in
// the checksum over both.
func (l layout) putChunk(b []byte, length int, typ byte, syncOffset int64) {
	hs := l.headerSize()
	binary.LittleEndian.PutUint16(b[8:10], uint16(length))
	b[10] = typ
	binary.LittleEndian.PutUint64(b[11:19], uint64(syncOffset))
	if l.recyclable {
		b[10] += recyclableTypes
		binary.LittleEndian.PutUint32(b[19:23], l.logNum)
		binary.LittleEndian.PutUint32(b[23:27], l.salt)
	}
	binary.LittleEndian.PutUint64(b[0:8], xxhash.Sum64(b[8:hs+length]))
}

// chunkProblem is why the bytes at some offset are not a valid chunk, or ""
// when they are. The reasons end up in corruption errors, so they say what
// was seen rather than what it might mean.
type chunkProblem string

const (
	problemNone        chunkProblem = ""
	problemTruncHeader chunkProblem = "truncated chunk header"
	problemZeroHeader  chunkProblem = "zero-filled chunk header"
	problemBadLength   chunkProblem = "chunk length crosses the block boundary"
	problemTruncated   chunkProblem = "chunk payload truncated by end of file"
	problemChecksum    chunkProblem = "checksum mismatch"
	problemBadType     chunkProblem = "invalid chunk type"
	problemBadSync     chunkProblem = "sync offset beyond the chunk's own offset"
	problemForeign     chunkProblem = "a chunk of another log"
)

// checkChunk validates the chunk of layout l starting at block[pos:],
// where block holds the bytes of one block that are present in the file
// (fewer than BlockSize for the file's last block) and blockOff is the
// block's file offset. The caller guarantees pos+l.headerSize() <=
// BlockSize. A chunk intact in every other way but written for another
// log is problemForeign.
func (l layout) checkChunk(block []byte, pos int, blockOff int64) (chunkHeader, chunkProblem) {
	hs := l.headerSize()
	if pos+hs > len(block) {
		return chunkHeader{}, problemTruncHeader
	}
	h := l.decodeHeader(block[pos:])
	if isZero(block[pos : pos+hs]) {
		return h, problemZeroHeader
	}
	end := pos + hs + h.length
	if end > BlockSize {
		return h, problemBadLength
	}
	if end > len(block) {
		return h, problemTruncated
	}
	if xxhash.Sum64(block[pos+8:end]) != h.checksum {
		return h, problemChecksum
	}
	if h.typ == 0 {
		return h, problemBadType
	}
	// A writer only ever records a durable offset it has reached, which is
	// at most the start of the record being written. A larger value is not
	// something this format produces, so it cannot be trusted as evidence.
	if h.syncOffset < 0 || h.syncOffset > blockOff+int64(pos) {
		return h, problemBadSync
	}
	if l.recyclable && !l.owns(h) {
		return h, problemForeign
	}
	return h, problemNone
}

func isZero(b []byte) bool { return zeroRunEnd(b, 0) == len(b) }

// zeroRunEnd returns the index of the first nonzero byte of b at or past
// i, or len(b). It compares 64 bytes at a time: a block of zeros costs a
// few hundred comparisons rather than 32 Ki byte loads.
func zeroRunEnd(b []byte, i int) int {
	var zeros [64]byte
	for i+len(zeros) <= len(b) && bytes.Equal(b[i:i+len(zeros)], zeros[:]) {
		i += len(zeros)
	}
	for i < len(b) && b[i] == 0 {
		i++
	}
	return i
}
