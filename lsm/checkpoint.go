package lsm

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"slices"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// Checkpoint writes into dir a copy of the DB as of one sequence number,
// seq, while the DB keeps taking reads and writes, and returns seq. dir
// must not exist or be empty; it is on the DB's filesystem. Opening dir
// afterwards (it is an ordinary DB directory) yields exactly the batches
// with sequence numbers up to seq: every batch acknowledged before
// Checkpoint was called, none that began committing after it returned,
// and never part of a batch.
//
// How (docs/backup.md): under the commit lock the mutable memtable is
// rotated to a fresh WAL segment, so that every batch up to seq is in a
// closed, immutable segment and every later one in newer segments; the
// current version (its tables) and the oldest WAL segment it still needs
// are pinned together. Checkpoint then waits until seq is committed (so
// the copy holds no batch whose sync failed), gives each table a second
// name in dir (a hard link where the filesystem allows, else a copy),
// copies each needed segment (never linked: a retired segment's file is
// reused, logRecycler), and writes a new MANIFEST describing exactly those
// tables, with lastSeq = seq, and a CURRENT naming it. Writers wait only
// for the rotation; the files are linked or copied outside every lock.
//
// On failure Checkpoint removes what it wrote. It must not run
// concurrently with Close.
func (db *DB) Checkpoint(dir string) (seq uint64, err error) {
	if db.closed.Load() {
		return 0, ErrClosed
	}
	fs := db.fs
	if err := mkdirAllDurable(fs, dir); err != nil {
		return 0, fmt.Errorf("lsm: checkpoint %s: %w", dir, err)
	}
	if names, err := fs.List(dir); err != nil {
		return 0, fmt.Errorf("lsm: checkpoint %s: %w", dir, err)
	} else if len(names) > 0 {
		return 0, fmt.Errorf("lsm: checkpoint %s: the directory is not empty (%d entries)", dir, len(names))
	}

	pin, err := db.pinCheckpoint()
	if err != nil {
		return 0, fmt.Errorf("lsm: checkpoint %s: %w", dir, err)
	}
	defer pin.release()

	var written []string
	fail := func(err error) (uint64, error) {
		for _, name := range written {
			fs.Remove(name)
		}
		return 0, fmt.Errorf("lsm: checkpoint %s: %w", dir, err)
	}
	// Every batch up to seq must be committed before the copy can claim
	// it: a batch still waiting for its fsync might yet fail.
	if err := db.WaitVisible(uint64(pin.seq)); err != nil {
		return fail(fmt.Errorf("a batch up to sequence number %d did not commit: %w", pin.seq, err))
	}
	for _, files := range pin.version.levels {
		for _, f := range files {
			src := makeFilename(db.dir, fileTypeTable, f.fileNum)
			dst := makeFilename(dir, fileTypeTable, f.fileNum)
			written = append(written, dst)
			if err := linkOrCopy(fs, src, dst); err != nil {
				return fail(err)
			}
		}
	}
	for _, l := range pin.logs {
		// Copied, not linked: a segment's file is reused for a later
		// segment once it retires (logRecycler), which would overwrite
		// the checkpoint's copy through a link. And copied only as far
		// as its records go: past them, a reused file holds an older
		// segment's, whose writes the copy has no business keeping.
		src := makeFilename(db.dir, fileTypeLog, l.num)
		dst := makeFilename(dir, fileTypeLog, l.num)
		end, err := logEndOf(l.file, l.num)
		if err != nil {
			return fail(fmt.Errorf("WAL %06d: %w", l.num, err))
		}
		written = append(written, dst)
		if err := copyFile(fs, src, dst, l.file, end); err != nil {
			return fail(err)
		}
	}

	manifestNum, tempNum := pin.nextFileNum, pin.nextFileNum+1
	manifest := makeFilename(dir, fileTypeManifest, manifestNum)
	written = append(written, manifest)
	e := pin.version.snapshotEdit()
	e.logNum = pin.logNum
	e.nextFileNum = pin.nextFileNum + 2
	e.lastSeq = pin.seq
	if err := writeManifestFile(fs, manifest, e); err != nil {
		return fail(err)
	}
	written = append(written, makeFilename(dir, fileTypeCurrent, 0))
	if err := setCurrent(fs, dir, manifestNum, tempNum); err != nil {
		return fail(err)
	}
	return uint64(pin.seq), nil
}

// checkpointPin is what Checkpoint copies: a version, the WAL segments
// from the version's log number on that hold batches up to seq (open, so
// a flush deleting one cannot take it away), and the counters to write.
type checkpointPin struct {
	db          *DB
	seq         base.SeqNum
	version     *version
	logNum      uint64
	nextFileNum uint64
	logs        []pinnedLog
}

type pinnedLog struct {
	num  uint64
	file vfs.File
}

func (p *checkpointPin) release() {
	p.version.unref()
	for _, l := range p.logs {
		l.file.Close()
	}
	p.db.logs.unpin(p.nums())
}

func (p *checkpointPin) nums() []uint64 {
	nums := make([]uint64, len(p.logs))
	for i, l := range p.logs {
		nums[i] = l.num
	}
	return nums
}

// pinCheckpoint rotates the mutable memtable (unless it is empty) so that
// the batches up to the last assigned sequence number all lie in closed WAL
// segments, and pins the current version with those segments.
func (db *DB) pinCheckpoint() (*checkpointPin, error) {
	db.commit.mu.Lock()
	defer db.commit.mu.Unlock()
	db.mu.Lock()
	if err := db.writeErrLocked(); err != nil {
		db.mu.Unlock()
		return nil, err
	}
	if !db.mem.mutable.unwritten() {
		newLogNum := db.versions.newFileNum()
		db.mu.Unlock()
		if err := db.rotateMemTable(newLogNum); err != nil {
			return nil, db.failWrites(err)
		}
		db.mu.Lock()
	}
	// The segments copied must be complete: the last rotation's close
	// (this one's or an earlier one's) may still be under way.
	db.mu.Unlock()
	if err := db.awaitLogClose(db.log.previousClosed); err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	// The mutable memtable is empty, so the segment it writes to holds no
	// record yet: every batch up to seq is in an older, closed segment,
	// and no flush can have put a later batch into a table.
	p := &checkpointPin{
		db:          db,
		seq:         base.SeqNum(db.commit.logSeq.Load()),
		version:     db.versions.current,
		logNum:      db.versions.logNum,
		nextFileNum: db.versions.nextFileNum,
	}
	names, err := db.fs.List(db.dir)
	if err != nil {
		return nil, err
	}
	var nums []uint64
	for _, name := range names {
		if ft, num := parseFilename(name); ft == fileTypeLog && num >= p.logNum && num < db.log.num {
			nums = append(nums, num)
		}
	}
	slices.Sort(nums)
	// A flush deletes a segment once its edit is logged, and only one
	// below the logged log number: every segment the pinned version
	// needs is still present.
	for _, num := range nums {
		f, err := db.fs.Open(makeFilename(db.dir, fileTypeLog, num))
		if err != nil {
			for _, l := range p.logs {
				l.file.Close()
			}
			return nil, fmt.Errorf("open WAL %06d: %w", num, err)
		}
		p.logs = append(p.logs, pinnedLog{num: num, file: f})
	}
	p.version.ref()
	db.logs.pin(p.nums())
	return p, nil
}

// linkOrCopy gives the file src the name dst: a hard link when fs can make
// one, else a synced copy (copyFile). The new name is made durable by the
// directory sync of setCurrent.
func linkOrCopy(fs vfs.FS, src, dst string) error {
	if l, ok := fs.(vfs.Linker); ok {
		err := l.Link(src, dst)
		if err == nil {
			return nil
		}
		if errors.Is(err, iofs.ErrExist) {
			return fmt.Errorf("link %s: %w", dst, err)
		}
		// Another device, or a filesystem without hard links: copy
		// instead.
	}
	return copyFile(fs, src, dst, nil, -1)
}

// logEndOf returns where the records of closed WAL segment num, read
// from f, end: an error if they do not read whole.
func logEndOf(f vfs.File, num uint64) (int64, error) {
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	r := wal.NewRecyclableReader(f, info.Size(), num)
	for {
		if _, err := r.Next(); err == io.EOF {
			break
		} else if err != nil {
			return 0, err
		}
	}
	if torn, end := r.TornTail(); torn {
		return 0, fmt.Errorf("a closed segment ends in a torn record at offset %d: %w", end, ErrCorruption)
	}
	return r.Offset(), nil
}

// copyFile writes dst, synced, with the first size bytes of src (all of
// it when size is negative), read from open (or from src when open is
// nil).
func copyFile(fs vfs.FS, src, dst string, open vfs.File, size int64) error {
	in := open
	if in == nil {
		f, err := fs.Open(src)
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		defer f.Close()
		in = f
	}
	if size < 0 {
		info, err := in.Stat()
		if err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		size = info.Size()
	}
	out, err := fs.Create(dst)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	_, err = io.Copy(out, io.NewSectionReader(in, 0, size))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// writeManifestFile writes a manifest holding the one edit e, synced.
func writeManifestFile(fs vfs.FS, name string, e *versionEdit) error {
	f, err := fs.Create(name)
	if err != nil {
		return fmt.Errorf("create manifest: %w", err)
	}
	w := wal.NewWriter(f, wal.WriterOptions{})
	end, err := w.WriteRecord(e.encode())
	if err == nil {
		err = w.SyncTo(end)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write manifest %s: %w", name, err)
	}
	return nil
}
