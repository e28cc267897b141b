package lsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/sstable"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// VerifyError names the first damaged file Verify found and the offset of
// the damage in it: the bad byte of CURRENT, the start of the bad record
// of a MANIFEST or WAL segment, the bad block of an sstable. Offset is -1
// when the problem is the file as a whole (missing, or of the wrong size).
type VerifyError struct {
	File   string
	Offset int64
	Err    error
}

func (e *VerifyError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s: offset %d: %v", e.File, e.Offset, e.Err)
}

func (e *VerifyError) Unwrap() error { return e.Err }

// VerifyReport is what Verify checked, and what it noticed that is not
// damage.
type VerifyReport struct {
	Manifest         string
	ManifestRecords  int
	Tables           int
	TableEntries     uint64
	WALSegments      int
	WALBatches       int
	LastSeq          uint64
	Notes            []string // e.g. a crash's torn WAL tail, leftover files
	LevelTableCounts [NumLevels]int
}

// Verify checks every byte of the DB in dir that a read could depend on,
// without opening the DB or changing any file: CURRENT names a manifest;
// every MANIFEST record is intact and decodes into version edits that
// apply cleanly (tables deleted from where they are, no overlaps within
// L1 and below, no table's sequence numbers past the last one recorded);
// every table of the resulting version exists with the
// size the manifest records, passes sstable.Verify (every block checksum,
// key order, filter, properties), and holds exactly the key and sequence
// range the manifest says, so that levels 1 and below are ordered and
// disjoint by their real contents; every record of every WAL segment the
// DB would replay is intact, decodes as a batch, and follows the previous
// batch's sequence numbers.
//
// A torn tail a crash leaves (the file ending inside a record, or a zero
// filled header) in a WAL segment or the MANIFEST is not damage: the next
// Open drops it, and it was never acknowledged; it is reported in Notes,
// as are WAL segments that start after such a loss (docs/wal.md), which
// Open leaves out. A damaged chunk there is reported as an error, although Open
// would also drop it, because a crash does not produce one.
//
// Verify takes the DB's lock, so it fails at once on a DB that is open,
// here or in another process. The error is a *VerifyError for damage.
func Verify(dir string, fs vfs.FS) (*VerifyReport, error) {
	if fs == nil {
		fs = vfs.Default()
	}
	lock, err := fs.Lock(makeFilename(dir, fileTypeLock, 0))
	if err != nil {
		return nil, fmt.Errorf("lsm: verify %s: %w", dir, err)
	}
	defer lock.Close()
	v := &verifier{dir: dir, fs: fs, rep: &VerifyReport{}}
	if err := v.run(); err != nil {
		return v.rep, err
	}
	return v.rep, nil
}

type verifier struct {
	dir string
	fs  vfs.FS
	rep *VerifyReport
}

func (v *verifier) fail(ft fileType, num uint64, off int64, format string, args ...any) error {
	return &VerifyError{File: makeFilename(v.dir, ft, num), Offset: off, Err: fmt.Errorf(format, args...)}
}

func (v *verifier) run() error {
	manifestNum, err := v.current()
	if err != nil {
		return err
	}
	version, logNum, lastSeq, err := v.manifest(manifestNum)
	if err != nil {
		return err
	}
	defer version.unref()
	v.rep.LastSeq = uint64(lastSeq)
	if err := v.tables(version); err != nil {
		return err
	}
	return v.logs(logNum)
}

// current checks CURRENT and returns the manifest number it names.
func (v *verifier) current() (uint64, error) {
	name := makeFilename(v.dir, fileTypeCurrent, 0)
	f, err := v.fs.Open(name)
	if err != nil {
		return 0, &VerifyError{File: name, Offset: -1, Err: err}
	}
	content, err := io.ReadAll(io.LimitReader(f, 256))
	f.Close()
	if err != nil {
		return 0, &VerifyError{File: name, Offset: -1, Err: err}
	}
	// The only valid content: "MANIFEST-" digits "\n".
	const prefix = "MANIFEST-"
	i := 0
	for i < len(content) && i < len(prefix) && content[i] == prefix[i] {
		i++
	}
	if i == len(prefix) {
		for i < len(content) && content[i] >= '0' && content[i] <= '9' {
			i++
		}
		if i > len(prefix) && i == len(content)-1 && content[i] == '\n' {
			ft, num := parseFilename(string(content[:i]))
			if ft == fileTypeManifest {
				return num, nil
			}
		}
	}
	return 0, &VerifyError{File: name, Offset: int64(min(i, len(content))), Err: fmt.Errorf("does not name a manifest (%q): %w", content, ErrCorruption)}
}

// manifest replays the manifest, checking every record.
func (v *verifier) manifest(num uint64) (*version, uint64, base.SeqNum, error) {
	name := makeFilename(v.dir, fileTypeManifest, num)
	v.rep.Manifest = name
	f, err := v.fs.Open(name)
	if err != nil {
		return nil, 0, 0, v.fail(fileTypeManifest, num, -1, "the manifest CURRENT names: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, 0, 0, v.fail(fileTypeManifest, num, -1, "%w", err)
	}
	opts := (&Options{FS: v.fs}).withDefaults()
	vs := newVersionSet(v.dir, &opts, nil, nil)
	cur := vs.current
	r := wal.NewReader(f, info.Size())
	for i := 0; ; i++ {
		start := r.Offset()
		rec, err := r.Next()
		if err == io.EOF {
			if i == 0 {
				return cur, 0, 0, v.fail(fileTypeManifest, num, 0, "no intact record: %w", ErrCorruption)
			}
			if err := v.tornTail(r, fileTypeManifest, num, info.Size()); err != nil {
				return cur, 0, 0, err
			}
			break
		} else if err != nil {
			return cur, 0, 0, v.fail(fileTypeManifest, num, start, "record %d: %w", i, err)
		}
		e, err := decodeVersionEdit(rec)
		if err != nil {
			return cur, 0, 0, v.fail(fileTypeManifest, num, start, "record %d: %w", i, err)
		}
		if i == 0 && e.formatVersion == 0 {
			return cur, 0, 0, v.fail(fileTypeManifest, num, start, "first record lacks a format version: %w", ErrCorruption)
		}
		nv, err := cur.applyEdit(e)
		if err != nil {
			return cur, 0, 0, v.fail(fileTypeManifest, num, start, "record %d: %w", i, err)
		}
		cur.unref()
		cur = nv
		vs.applyCounters(e)
		v.rep.ManifestRecords++
	}
	for level, files := range cur.levels {
		for _, f := range files {
			if f.fileNum >= vs.nextFileNum {
				return cur, 0, 0, v.fail(fileTypeManifest, num, -1, "table %06d in L%d is not below the next file number %d: %w", f.fileNum, level, vs.nextFileNum, ErrCorruption)
			}
			if f.largestSeq > vs.lastSeq {
				// Open reads at the manifest's last sequence number: the
				// table's newer entries would be hidden.
				return cur, 0, 0, v.fail(fileTypeManifest, num, -1, "table %06d in L%d holds sequence number %d, past the manifest's last one %d: %w", f.fileNum, level, f.largestSeq, vs.lastSeq, ErrCorruption)
			}
		}
	}
	return cur, vs.logNum, vs.lastSeq, nil
}

// tornTail judges the torn tail, if any, of a log the reader finished.
func (v *verifier) tornTail(r *wal.Reader, ft fileType, num uint64, size int64) error {
	torn, end := r.TornTail()
	if !torn {
		return nil
	}
	off, why, cut := r.TornDamage()
	if !cut {
		return v.fail(ft, num, off, "damaged chunk after the last intact record (which ends at %d): %s: %w", end, why, ErrCorruption)
	}
	v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("%s: torn tail of %d bytes from offset %d (%s): a crash cut an unacknowledged write; the next open drops it",
		filepath.Base(makeFilename(v.dir, ft, num)), size-end, end, why))
	return nil
}

// tables verifies every table of the version against its metadata.
func (v *verifier) tables(cur *version) error {
	live := map[uint64]bool{}
	for level, files := range cur.levels {
		var prev *sstable.Summary
		for _, m := range files {
			live[m.fileNum] = true
			s, err := v.table(m)
			if err != nil {
				return err
			}
			if level > 0 && prev != nil && bytes.Compare(prev.Last.UserKey, s.First.UserKey) >= 0 {
				return v.fail(fileTypeTable, m.fileNum, -1, "L%d: first key %q is not after the previous table's last key %q: %w", level, s.First.UserKey, prev.Last.UserKey, ErrCorruption)
			}
			prev = &s
			v.rep.Tables++
			v.rep.LevelTableCounts[level]++
			v.rep.TableEntries += s.Entries
		}
	}
	names, err := v.fs.List(v.dir)
	if err != nil {
		return fmt.Errorf("lsm: verify %s: %w", v.dir, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if ft, num := parseFilename(name); ft == fileTypeTable && !live[num] {
			v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("%s: not in the manifest (left by a crash or a running compaction); the next open deletes it", name))
		}
	}
	return nil
}

func (v *verifier) table(m *fileMetadata) (sstable.Summary, error) {
	name := makeFilename(v.dir, fileTypeTable, m.fileNum)
	f, err := v.fs.Open(name)
	if err != nil {
		return sstable.Summary{}, v.fail(fileTypeTable, m.fileNum, -1, "a table of the manifest: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return sstable.Summary{}, v.fail(fileTypeTable, m.fileNum, -1, "%w", err)
	}
	if uint64(info.Size()) != m.size {
		return sstable.Summary{}, v.fail(fileTypeTable, m.fileNum, -1, "%d bytes, the manifest says %d: %w", info.Size(), m.size, ErrCorruption)
	}
	s, err := sstable.Verify(f, info.Size())
	if err != nil {
		var se *sstable.VerifyError
		if errors.As(err, &se) {
			if strings.HasPrefix(se.Err.Error(), se.What+":") {
				return s, v.fail(fileTypeTable, m.fileNum, se.Offset, "%w", se.Err)
			}
			return s, v.fail(fileTypeTable, m.fileNum, se.Offset, "%s: %w", se.What, se.Err)
		}
		return s, v.fail(fileTypeTable, m.fileNum, -1, "%w", err)
	}
	if s.Entries == 0 || base.InternalCompare(s.First, m.smallest) != 0 || base.InternalCompare(s.Last, m.largest) != 0 {
		return s, v.fail(fileTypeTable, m.fileNum, -1, "holds keys %s..%s (%d entries), the manifest says %s..%s: %w", s.First, s.Last, s.Entries, m.smallest, m.largest, ErrCorruption)
	}
	if s.SmallestSeq != m.smallestSeq || s.LargestSeq != m.largestSeq {
		return s, v.fail(fileTypeTable, m.fileNum, -1, "holds sequence numbers %d..%d, the manifest says %d..%d: %w", s.SmallestSeq, s.LargestSeq, m.smallestSeq, m.largestSeq, ErrCorruption)
	}
	return s, nil
}

// logs verifies the WAL segments recovery would replay.
func (v *verifier) logs(logNum uint64) error {
	names, err := v.fs.List(v.dir)
	if err != nil {
		return fmt.Errorf("lsm: verify %s: %w", v.dir, err)
	}
	var nums []uint64
	for _, name := range names {
		if ft, num := parseFilename(name); ft == fileTypeLog {
			if num >= logNum {
				nums = append(nums, num)
			} else {
				v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("%s: below the manifest's log number %d, so obsolete; the next open deletes it", name, logNum))
			}
		}
	}
	slices.Sort(nums)
	var end logEnd
	for _, num := range nums {
		next, err := v.log(num, end)
		if err != nil {
			return err
		}
		if next.gap {
			v.rep.Notes = append(v.rep.Notes, fmt.Sprintf("%s: starts after writes a crash lost from the segment before it; the next open leaves it and any newer segment out",
				makeFilename("", fileTypeLog, num)))
			break
		}
		end = next
		v.rep.WALSegments++
	}
	v.rep.LastSeq = max(v.rep.LastSeq, uint64(end.lastSeq))
	return nil
}

// log verifies one WAL segment, after the segments that ended at end, as
// replayLog reads it (logEnd).
func (v *verifier) log(num uint64, end logEnd) (logEnd, error) {
	f, err := v.fs.Open(makeFilename(v.dir, fileTypeLog, num))
	if err != nil {
		return end, v.fail(fileTypeLog, num, -1, "%w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return end, v.fail(fileTypeLog, num, -1, "%w", err)
	}
	r := wal.NewRecyclableReader(f, info.Size(), num)
	records := 0
	for ; ; records++ {
		start := r.Offset()
		rec, err := r.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			return end, v.fail(fileTypeLog, num, start, "record %d: %w", records, err)
		}
		br, err := newBatchReader(rec)
		if err != nil {
			return end, v.fail(fileTypeLog, num, start, "record %d: %w", records, err)
		}
		for {
			_, _, ok, err := br.next()
			if err != nil {
				return end, v.fail(fileTypeLog, num, start, "record %d: %w", records, err)
			}
			if !ok {
				break
			}
		}
		if records == 0 {
			if err := end.begin(br.seq); err != nil {
				return end, v.fail(fileTypeLog, num, start, "sequence number %d: %w", br.seq, err)
			}
			if end.gap {
				return end, nil
			}
		} else if br.count == 0 {
			return end, v.fail(fileTypeLog, num, start, "record %d: an empty batch past the segment's first record, which is never logged: %w", records, ErrCorruption)
		}
		if br.count == 0 {
			continue // the segment's header
		}
		if end.lastSeq != 0 && br.seq <= end.lastSeq {
			return end, v.fail(fileTypeLog, num, start, "record %d: batch at sequence number %d does not follow %d: %w", records, br.seq, end.lastSeq, ErrCorruption)
		}
		end.add(br.seq, br.count)
		v.rep.WALBatches++
	}
	torn, _ := r.TornTail()
	end.finish(records, torn)
	if err := v.tornTail(r, fileTypeLog, num, info.Size()); err != nil {
		return end, err
	}
	return end, nil
}
