package lsm

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/tabuladb/tabula/internal/base"
)

// manifestFormatVersion is the version of the version-edit encoding
// (docs/manifest.md), and so of the store: every manifest starts with an
// edit that records it, and a build refuses a store of a newer version.
// Version 2: the WAL segments may be in recyclable chunks (docs/wal.md,
// version 2), which a version 1 build reads as empty segments, dropping
// every newer one: it must refuse the store instead. The edits encode as
// in version 1.
const manifestFormatVersion = 2

// Version-edit field tags. The numeric values are part of the MANIFEST
// format and never change.
const (
	tagFormatVersion = 1
	tagLogNum        = 2
	tagNextFileNum   = 3
	tagLastSeq       = 4
	tagDeletedFile   = 5
	tagNewFile       = 6
)

// deletedFileEntry names a table removed from a level.
type deletedFileEntry struct {
	level   int
	fileNum uint64
}

// newFileEntry is a table added to a level.
type newFileEntry struct {
	level int
	meta  *fileMetadata
}

// versionEdit is the difference between two versions: one MANIFEST record.
// Fields that are zero are absent from the record.
type versionEdit struct {
	formatVersion uint64
	// logNum is the lowest WAL number whose records are not all in
	// sstables; WAL segments below it are obsolete.
	logNum      uint64
	nextFileNum uint64
	lastSeq     base.SeqNum
	deleted     []deletedFileEntry
	added       []newFileEntry
}

func (e *versionEdit) encode() []byte {
	var b []byte
	putUint := func(tag int, v uint64) {
		b = binary.AppendUvarint(b, uint64(tag))
		b = binary.AppendUvarint(b, v)
	}
	if e.formatVersion != 0 {
		putUint(tagFormatVersion, e.formatVersion)
	}
	if e.logNum != 0 {
		putUint(tagLogNum, e.logNum)
	}
	if e.nextFileNum != 0 {
		putUint(tagNextFileNum, e.nextFileNum)
	}
	if e.lastSeq != 0 {
		putUint(tagLastSeq, uint64(e.lastSeq))
	}
	for _, d := range e.deleted {
		putUint(tagDeletedFile, uint64(d.level))
		b = binary.AppendUvarint(b, d.fileNum)
	}
	for _, a := range e.added {
		m := a.meta
		putUint(tagNewFile, uint64(a.level))
		b = binary.AppendUvarint(b, m.fileNum)
		b = binary.AppendUvarint(b, m.size)
		b = binary.AppendUvarint(b, uint64(m.smallest.Size()))
		b = m.smallest.AppendEncoded(b)
		b = binary.AppendUvarint(b, uint64(m.largest.Size()))
		b = m.largest.AppendEncoded(b)
		b = binary.AppendUvarint(b, uint64(m.smallestSeq))
		b = binary.AppendUvarint(b, uint64(m.largestSeq))
	}
	return b
}

// editDecoder reads the fields of one encoded edit.
type editDecoder struct {
	b   []byte
	err error
}

func (d *editDecoder) uint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("version edit: bad %s: %w", what, ErrCorruption)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *editDecoder) level() int {
	l := d.uint("level")
	if d.err == nil && l >= NumLevels {
		d.err = fmt.Errorf("version edit: level %d out of range: %w", l, ErrCorruption)
	}
	return int(l)
}

func (d *editDecoder) internalKey(what string) base.InternalKey {
	n := d.uint(what + " length")
	if d.err != nil {
		return base.InternalKey{}
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("version edit: %s length %d beyond record: %w", what, n, ErrCorruption)
		return base.InternalKey{}
	}
	k, ok := base.DecodeInternalKey(d.b[:n])
	if !ok {
		d.err = fmt.Errorf("version edit: %s too short: %w", what, ErrCorruption)
		return base.InternalKey{}
	}
	d.b = d.b[n:]
	return k.Clone()
}

// decodeVersionEdit parses one MANIFEST record.
func decodeVersionEdit(b []byte) (*versionEdit, error) {
	e := &versionEdit{}
	d := editDecoder{b: b}
	for len(d.b) > 0 && d.err == nil {
		switch tag := d.uint("tag"); tag {
		case tagFormatVersion:
			e.formatVersion = d.uint("format version")
			// Checked before the rest is decoded: a newer build may also
			// write fields this one does not know, and the refusal should
			// name the version, not the first unknown field.
			if d.err == nil && e.formatVersion > manifestFormatVersion {
				d.err = fmt.Errorf("version edit: format version %d is newer than this build's %d: %w", e.formatVersion, manifestFormatVersion, ErrCorruption)
			}
		case tagLogNum:
			e.logNum = d.uint("log number")
		case tagNextFileNum:
			e.nextFileNum = d.uint("next file number")
		case tagLastSeq:
			e.lastSeq = base.SeqNum(d.uint("last sequence number"))
		case tagDeletedFile:
			level := d.level()
			e.deleted = append(e.deleted, deletedFileEntry{level: level, fileNum: d.uint("file number")})
		case tagNewFile:
			level := d.level()
			m := &fileMetadata{}
			m.fileNum = d.uint("file number")
			m.size = d.uint("file size")
			m.smallest = d.internalKey("smallest key")
			m.largest = d.internalKey("largest key")
			m.smallestSeq = base.SeqNum(d.uint("smallest seqnum"))
			m.largestSeq = base.SeqNum(d.uint("largest seqnum"))
			if d.err == nil && base.InternalCompare(m.smallest, m.largest) > 0 {
				d.err = fmt.Errorf("version edit: table %d has smallest key %s > largest %s: %w", m.fileNum, m.smallest, m.largest, ErrCorruption)
			}
			e.added = append(e.added, newFileEntry{level: level, meta: m})
		default:
			if d.err == nil {
				d.err = fmt.Errorf("version edit: unknown tag %d: %w", tag, ErrCorruption)
			}
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return e, nil
}

// ReencodeVersionEdit decodes record as one MANIFEST record (a version
// edit), as Open does, and returns the edit encoded again with a
// description of every field decoded, which is the same for two records
// exactly when they decode to the same edit. It exists for the fuzz tests,
// which live in another package and check that encoding and decoding
// agree; the engine does not use it.
func ReencodeVersionEdit(record []byte) (encoded []byte, fields string, err error) {
	e, err := decodeVersionEdit(record)
	if err != nil {
		return nil, "", err
	}
	return e.encode(), e.describe(), nil
}

// describe spells out every field of e, keys and trailers in full.
func (e *versionEdit) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "format %d, log %d, next file %d, last seq %d", e.formatVersion, e.logNum, e.nextFileNum, e.lastSeq)
	for _, d := range e.deleted {
		fmt.Fprintf(&b, "; delete L%d %d", d.level, d.fileNum)
	}
	for _, a := range e.added {
		m := a.meta
		fmt.Fprintf(&b, "; add L%d %d size %d keys %q#%x..%q#%x seqs %d..%d", a.level, m.fileNum, m.size,
			m.smallest.UserKey, uint64(m.smallest.Trailer), m.largest.UserKey, uint64(m.largest.Trailer), m.smallestSeq, m.largestSeq)
	}
	return b.String()
}
