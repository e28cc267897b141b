package sstable

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/tabuladb/tabula/internal/base"
)

// FormatVersion is the table format this package writes and the only one it
// reads. It is stored in the footer; a change to any byte layout described
// in docs/sstable.md needs a new version.
const FormatVersion uint32 = 1

// magic ends every table. A file that does not end with it is not a table
// (or was truncated).
const magic = "tabulaST"

// Layout of the fixed-size footer (all integers little-endian):
//
//	offset  size  field
//	 0      8     index block offset
//	 8      8     index block length
//	16      8     filter block offset
//	24      8     filter block length (0: no filter block)
//	32      8     properties block offset
//	40      8     properties block length
//	48      4     format version
//	52      8     xxhash64 of bytes 0..52
//	60      8     magic "tabulaST"
const (
	footerLen         = 68
	footerChecksumOff = 52
	footerMagicOff    = 60
)

// blockTrailerLen is the size of the trailer that follows every block: one
// byte of block type (compression) and an xxhash64 of the stored block bytes
// plus that type byte.
const blockTrailerLen = 9

// Block types, stored in the block trailer.
const (
	blockTypeNone = 0
	blockTypeS2   = 1
	blockTypeZstd = 2
)

// maxBlockLen bounds the size of any block, stored or decompressed: a
// writer refuses entries that could not fit in such a block, and a reader
// refuses larger blocks. (A reader also bounds decompressed sizes by the
// table's MaxBlockSize property, so a damaged length field cannot make it
// allocate more than the table's writer ever did.)
const maxBlockLen = 64 << 20

// MaxBlockSize is the largest WriterOptions.BlockSize: a block is cut once
// it holds BlockSize bytes, so it may hold one entry more, and an entry
// takes at most half of maxBlockLen.
const MaxBlockSize = maxBlockLen / 2

// blockHandle locates a block: its offset in the file and the length of its
// stored (possibly compressed) bytes, excluding the trailer.
type blockHandle struct {
	offset, length uint64
}

// end returns the offset just past the block's trailer.
func (h blockHandle) end() uint64 { return h.offset + h.length + blockTrailerLen }

// appendBlockHandle appends h as two uvarints, the encoding used in index
// block values.
func appendBlockHandle(dst []byte, h blockHandle) []byte {
	dst = binary.AppendUvarint(dst, h.offset)
	return binary.AppendUvarint(dst, h.length)
}

// decodeBlockHandle decodes a handle written by appendBlockHandle, which
// must fill src exactly.
func decodeBlockHandle(src []byte) (blockHandle, bool) {
	off, n := binary.Uvarint(src)
	if n <= 0 {
		return blockHandle{}, false
	}
	length, m := binary.Uvarint(src[n:])
	if m <= 0 || n+m != len(src) {
		return blockHandle{}, false
	}
	return blockHandle{offset: off, length: length}, true
}

// footer is the decoded footer.
type footer struct {
	index, filter, properties blockHandle
	version                   uint32
}

func (f footer) encode() []byte {
	buf := make([]byte, footerLen)
	binary.LittleEndian.PutUint64(buf[0:], f.index.offset)
	binary.LittleEndian.PutUint64(buf[8:], f.index.length)
	binary.LittleEndian.PutUint64(buf[16:], f.filter.offset)
	binary.LittleEndian.PutUint64(buf[24:], f.filter.length)
	binary.LittleEndian.PutUint64(buf[32:], f.properties.offset)
	binary.LittleEndian.PutUint64(buf[40:], f.properties.length)
	binary.LittleEndian.PutUint32(buf[48:], f.version)
	binary.LittleEndian.PutUint64(buf[footerChecksumOff:], xxhash.Sum64(buf[:footerChecksumOff]))
	copy(buf[footerMagicOff:], magic)
	return buf
}

// decodeFooter checks the magic, checksum and version of buf, the last
// footerLen bytes of a file of size fileSize, and checks that every handle
// lies in the part of the file before the footer.
func decodeFooter(buf []byte, fileSize uint64) (footer, error) {
	if string(buf[footerMagicOff:]) != magic {
		return footer{}, fmt.Errorf("footer: bad magic number (not an sstable, or truncated): %w", base.ErrCorruption)
	}
	if got, want := xxhash.Sum64(buf[:footerChecksumOff]), binary.LittleEndian.Uint64(buf[footerChecksumOff:]); got != want {
		return footer{}, fmt.Errorf("footer: checksum mismatch (computed %#x, stored %#x): %w", got, want, base.ErrCorruption)
	}
	f := footer{
		index:      blockHandle{binary.LittleEndian.Uint64(buf[0:]), binary.LittleEndian.Uint64(buf[8:])},
		filter:     blockHandle{binary.LittleEndian.Uint64(buf[16:]), binary.LittleEndian.Uint64(buf[24:])},
		properties: blockHandle{binary.LittleEndian.Uint64(buf[32:]), binary.LittleEndian.Uint64(buf[40:])},
		version:    binary.LittleEndian.Uint32(buf[48:]),
	}
	if f.version != FormatVersion {
		return footer{}, fmt.Errorf("footer: unsupported format version %d (this build reads %d)", f.version, FormatVersion)
	}
	limit := fileSize - footerLen
	for _, h := range []struct {
		name   string
		h      blockHandle
		absent bool
	}{
		{"index", f.index, false},
		{"filter", f.filter, f.filter.length == 0},
		{"properties", f.properties, false},
	} {
		if h.absent {
			continue
		}
		if !handleWithin(h.h, limit) {
			return footer{}, fmt.Errorf("footer: %s block handle (offset %d, length %d) outside the file: %w",
				h.name, h.h.offset, h.h.length, base.ErrCorruption)
		}
	}
	return f, nil
}

// handleWithin reports whether the block h (with its trailer) ends at or
// before limit, without overflowing on absurd handles.
func handleWithin(h blockHandle, limit uint64) bool {
	return h.offset <= limit && h.length <= limit && h.length+blockTrailerLen <= limit-h.offset
}
