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
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// FormatVersion is the version of the chunk layout described in
// docs/wal.md. Files carry no header, so the version is implied by the
// file's role (WAL segment or MANIFEST) in a store of a given version.
const FormatVersion = 1

// BlockSize is the size of the blocks a log is laid out in. No chunk
// crosses a block boundary, so a reader can always resume parsing at the
// start of any block.
const BlockSize = 32 << 10

// HeaderSize is the size of a chunk header:
//
//	checksum   uint64  xxhash64 of bytes [8, 19+length) of the chunk
//	length     uint16  payload length
//	type       uint8   chunkFull, chunkFirst, chunkMiddle or chunkLast
//	syncOffset uint64  file offset known durable when the chunk was written
//
// all little-endian.
const HeaderSize = 19

// maxPayload is the largest payload one chunk can carry.
const maxPayload = BlockSize - HeaderSize

// Chunk types. Zero is deliberately invalid so that a zero-filled region
// (a preallocated or never-written page) never parses as a chunk.
const (
	chunkFull   = 1
	chunkFirst  = 2
	chunkMiddle = 3
	chunkLast   = 4
)

// chunkHeader is a decoded chunk header.
type chunkHeader struct {
	checksum   uint64
	length     int
	typ        byte
	syncOffset int64
}

func decodeHeader(b []byte) chunkHeader {
	_ = b[HeaderSize-1]
	return chunkHeader{
		checksum:   binary.LittleEndian.Uint64(b[0:8]),
		length:     int(binary.LittleEndian.Uint16(b[8:10])),
		typ:        b[10],
		syncOffset: int64(binary.LittleEndian.Uint64(b[11:19])),
	}
}

// putChunk encodes a chunk header in b[:HeaderSize] for the payload that
// the caller has already placed at b[HeaderSize:HeaderSize+length], then
// fills in the checksum over both.
func putChunk(b []byte, length int, typ byte, syncOffset int64) {
	binary.LittleEndian.PutUint16(b[8:10], uint16(length))
	b[10] = typ
	binary.LittleEndian.PutUint64(b[11:19], uint64(syncOffset))
	binary.LittleEndian.PutUint64(b[0:8], xxhash.Sum64(b[8:HeaderSize+length]))
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
)

// checkChunk validates the chunk starting at block[pos:], where block holds
// the bytes of one block that are present in the file (fewer than
// BlockSize for the file's last block) and blockOff is the block's file
// offset. The caller guarantees pos+HeaderSize <= BlockSize.
func checkChunk(block []byte, pos int, blockOff int64) (chunkHeader, chunkProblem) {
	if pos+HeaderSize > len(block) {
		return chunkHeader{}, problemTruncHeader
	}
	h := decodeHeader(block[pos:])
	if h == (chunkHeader{}) {
		return h, problemZeroHeader
	}
	end := pos + HeaderSize + h.length
	if end > BlockSize {
		return h, problemBadLength
	}
	if end > len(block) {
		return h, problemTruncated
	}
	if xxhash.Sum64(block[pos+8:end]) != h.checksum {
		return h, problemChecksum
	}
	if h.typ < chunkFull || h.typ > chunkLast {
		return h, problemBadType
	}
	// A writer only ever records a durable offset it has reached, which is
	// at most the start of the record being written. A larger value is not
	// something this format produces, so it cannot be trusted as evidence.
	if h.syncOffset < 0 || h.syncOffset > blockOff+int64(pos) {
		return h, problemBadSync
	}
	return h, problemNone
}
