package lsm

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tabuladb/tabula/internal/base"
	"github.com/tabuladb/tabula/vfs"
	"github.com/tabuladb/tabula/wal"
)

// maxManifestSize is the size past which the next edit starts a new
// manifest holding a snapshot of the current version, so replaying the
// manifest at open stays quick.
const maxManifestSize = 4 << 20

// versionSet owns the current version and the MANIFEST that records how it
// came to be. All methods are called with mu (DB.mu) held, or before the DB
// is shared, during Open; logAndApply releases it while it writes.
type versionSet struct {
	dir  string
	fs   vfs.FS
	opts *Options
	// mu is DB.mu; nil for a version set read without a DB (Describe,
	// Verify), which logs no edit. logged, on mu, is signalled when an
	// edit is logged.
	mu     *sync.Mutex
	logged sync.Cond
	// logging is set while an edit is being written to the manifest,
	// without mu: edits are logged one at a time, and only the goroutine
	// logging one touches the manifest's writer.
	logging bool
	// closed is set by DB.Close before it closes the manifest: an edit
	// logged after that (a manual Compact racing Close) would start a new
	// manifest and rewrite CURRENT in a directory the DB no longer holds.
	closed bool
	// lastAssigned returns the DB's last assigned sequence number, which
	// an edit records. It is read once the edit's turn has come: an edit
	// that waited for another may hold tables that one added, with
	// sequence numbers past any read before the wait.
	lastAssigned func() base.SeqNum

	current *version
	// logNum is the lowest WAL number still needed for recovery.
	logNum      uint64
	nextFileNum uint64
	// lastSeq is the last sequence number recorded in the manifest; the
	// DB's is at least as large.
	lastSeq base.SeqNum

	manifestNum  uint64
	manifestFile vfs.File
	manifest     *wal.Writer
	// maxManifestSize is the size past which the next edit starts a new
	// manifest: the constant, except in tests that start one at every edit.
	maxManifestSize int64
	// err is sticky: once an edit may have reached the disk without being
	// installed, the state on disk is unknown, and logging another edit
	// (perhaps to a manifest CURRENT no longer names, or one deleting
	// tables the durable state still needs) could lose data.
	err error

	onObsolete func([]*fileMetadata)
	// l0Tables is the current version's L0 table count, for the writers'
	// slowdown, which takes no lock (DB.slowWrite).
	l0Tables atomic.Int32
}

// setCurrent makes v the current version (the caller has dealt with the
// old one's reference).
func (vs *versionSet) setCurrent(v *version) {
	vs.current = v
	vs.l0Tables.Store(int32(len(v.levels[0])))
}

func newVersionSet(dir string, opts *Options, mu *sync.Mutex, onObsolete func([]*fileMetadata)) *versionSet {
	vs := &versionSet{dir: dir, fs: opts.FS, opts: opts, mu: mu, onObsolete: onObsolete, nextFileNum: 1, maxManifestSize: maxManifestSize}
	vs.logged.L = mu
	vs.current = &version{onObsolete: onObsolete}
	vs.current.refs.Store(1)
	return vs
}

// newFileNum allocates a file number.
func (vs *versionSet) newFileNum() uint64 {
	n := vs.nextFileNum
	vs.nextFileNum++
	return n
}

// load recovers the version set from CURRENT and the manifest it names.
// exists is false when the directory holds no DB.
func (vs *versionSet) load() (exists bool, err error) {
	currentName := makeFilename(vs.dir, fileTypeCurrent, 0)
	cf, err := vs.fs.Open(currentName)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	content, err := io.ReadAll(io.LimitReader(cf, 256))
	cf.Close()
	if err != nil {
		return true, fmt.Errorf("read %s: %w", currentName, err)
	}
	name, ok := strings.CutSuffix(string(content), "\n")
	ft, num := parseFilename(name)
	if !ok || ft != fileTypeManifest {
		return true, fmt.Errorf("%s does not name a manifest (%q): %w", currentName, content, ErrCorruption)
	}
	vs.manifestNum = num
	manifestName := makeFilename(vs.dir, fileTypeManifest, num)
	mf, err := vs.fs.Open(manifestName)
	if err != nil {
		return true, fmt.Errorf("open manifest named by CURRENT: %w", err)
	}
	defer mf.Close()
	info, err := mf.Stat()
	if err != nil {
		return true, err
	}
	r := wal.NewReader(mf, info.Size())
	v := vs.current
	for i := 0; ; i++ {
		rec, err := r.Next()
		if err == io.EOF {
			if i == 0 {
				// The first record is synced before CURRENT names the
				// manifest, so it cannot be a torn tail.
				return true, fmt.Errorf("%s has no intact record: %w", manifestName, ErrCorruption)
			}
			break
		} else if err != nil {
			return true, fmt.Errorf("%s: %w", manifestName, err)
		}
		e, err := decodeVersionEdit(rec)
		if err != nil {
			return true, fmt.Errorf("%s: record %d: %w", manifestName, i, err)
		}
		if i == 0 && e.formatVersion == 0 {
			return true, fmt.Errorf("%s: first record lacks a format version: %w", manifestName, ErrCorruption)
		}
		nv, err := v.applyEdit(e)
		if err != nil {
			return true, fmt.Errorf("%s: record %d: %w", manifestName, i, err)
		}
		v.unref()
		v = nv
		vs.applyCounters(e)
	}
	vs.setCurrent(v)
	return true, nil
}

func (vs *versionSet) applyCounters(e *versionEdit) {
	if e.logNum != 0 {
		vs.logNum = e.logNum
	}
	if e.nextFileNum > vs.nextFileNum {
		vs.nextFileNum = e.nextFileNum
	}
	if e.lastSeq > vs.lastSeq {
		vs.lastSeq = e.lastSeq
	}
	for _, a := range e.added {
		if a.meta.fileNum >= vs.nextFileNum {
			vs.nextFileNum = a.meta.fileNum + 1
		}
	}
}

// errEditUncertain marks a failure after a version edit reached the
// MANIFEST (or CURRENT was being switched): the edit may be durable, and
// the next Open may install it, so the tables it adds must not be deleted.
var errEditUncertain = errors.New("the manifest edit may be durable")

// logAndApply records e in the manifest (synced) and makes the version it
// produces current. mu is released while the manifest is written and
// synced: a manifest fsync can wait behind a compaction's table fsyncs,
// and meanwhile readers taking snapshots and a writer rotating the
// memtable need mu. Until the edit is durable nothing reads its effect:
// the current version and the counters change only after.
func (vs *versionSet) logAndApply(e *versionEdit) error {
	for vs.logging {
		vs.logged.Wait()
	}
	if vs.closed {
		return ErrClosed
	}
	if vs.err != nil {
		return vs.err
	}
	nv, err := vs.current.applyEdit(e)
	if err != nil {
		return err
	}
	// At least every sequence number in nv's tables: a snapshot of nv
	// recording less would hide their newer entries after a restart.
	e.lastSeq = vs.lastAssigned()
	vs.logging = true
	defer func() {
		vs.logging = false
		vs.logged.Broadcast()
	}()
	if vs.manifest == nil || vs.manifest.Size() > vs.maxManifestSize {
		// The new manifest's snapshot already holds e's effect.
		m, err := vs.startManifest(nv, e)
		if err != nil {
			if errors.Is(err, errEditUncertain) {
				vs.err = err // nv kept, as below
			} else {
				nv.unref()
			}
			return err
		}
		vs.applyCounters(e)
		retire := vs.switchManifest(m)
		vs.current.unref()
		vs.setCurrent(nv)
		// Still logging: no other edit starts a manifest, and Close
		// waits, while the old one goes.
		vs.mu.Unlock()
		retire()
		vs.mu.Lock()
		return nil
	} else {
		e.nextFileNum = vs.nextFileNum
		rec := e.encode()
		vs.mu.Unlock()
		end, err := vs.manifest.WriteRecord(rec)
		if err == nil {
			err = vs.manifest.SyncTo(end)
		}
		vs.mu.Lock()
		if err != nil {
			// nv stays referenced on purpose: releasing it would queue the
			// tables e adds for deletion, and the edit may be durable. The
			// DB takes no more writes after this; Open sorts it out.
			vs.err = fmt.Errorf("write manifest %06d: %w: %w", vs.manifestNum, errEditUncertain, err)
			return vs.err
		}
		vs.applyCounters(e)
	}
	vs.current.unref()
	vs.setCurrent(nv)
	return nil
}

// newManifest is a manifest written and named by CURRENT, not yet the
// version set's.
type newManifest struct {
	num  uint64
	file vfs.File
	w    *wal.Writer
}

// createManifest writes a new manifest holding a snapshot of v and the
// version set's counters, points CURRENT at it, and retires the previous
// manifest (Open's).
func (vs *versionSet) createManifest(v *version, lastSeq base.SeqNum) error {
	m, err := vs.startManifest(v, &versionEdit{lastSeq: lastSeq})
	if err != nil {
		return err
	}
	vs.switchManifest(m)()
	return nil
}

// startManifest writes a new manifest holding a snapshot of v and the
// counters as e leaves them, and points CURRENT at it, with mu released.
// It changes nothing of vs but its next file number.
func (vs *versionSet) startManifest(v *version, e *versionEdit) (newManifest, error) {
	m := newManifest{num: vs.newFileNum()}
	tempNum := vs.newFileNum()
	snap := v.snapshotEdit()
	snap.logNum = vs.logNum
	if e.logNum != 0 {
		snap.logNum = e.logNum
	}
	snap.nextFileNum = vs.nextFileNum
	snap.lastSeq = max(e.lastSeq, vs.lastSeq)
	rec := snap.encode()

	vs.mu.Unlock()
	defer vs.mu.Lock()
	name := makeFilename(vs.dir, fileTypeManifest, m.num)
	f, err := vs.fs.Create(name)
	if err != nil {
		return m, fmt.Errorf("create manifest: %w", err)
	}
	w := wal.NewWriter(f, wal.WriterOptions{})
	end, err := w.WriteRecord(rec)
	if err == nil {
		err = w.SyncTo(end)
	}
	if err != nil {
		w.Close()
		f.Close()
		vs.fs.Remove(name)
		return m, fmt.Errorf("manifest %06d: %w", m.num, err)
	}
	if err := setCurrent(vs.fs, vs.dir, m.num, tempNum); err != nil {
		// CURRENT may name the new manifest already: keep it.
		w.Close()
		f.Close()
		return m, fmt.Errorf("manifest %06d: %w: %w", m.num, errEditUncertain, err)
	}
	m.file, m.w = f, w
	return m, nil
}

// switchManifest makes m, which CURRENT names, the manifest edits go to,
// and returns what retires the previous one (its close and unlink), for
// the caller to run without mu: an unlink waits for a busy journal.
func (vs *versionSet) switchManifest(m newManifest) (retire func()) {
	old, oldFile, oldNum := vs.manifest, vs.manifestFile, vs.manifestNum
	vs.manifest, vs.manifestFile, vs.manifestNum = m.w, m.file, m.num
	return func() {
		if old != nil {
			old.Close()
			oldFile.Close()
		}
		if oldNum != 0 {
			// Best effort: a leftover manifest is deleted at the next open.
			vs.fs.Remove(makeFilename(vs.dir, fileTypeManifest, oldNum))
		}
	}
}

func (vs *versionSet) closeManifest() error {
	if vs.manifest == nil {
		return nil
	}
	err := vs.manifest.Close()
	if cerr := vs.manifestFile.Close(); err == nil {
		err = cerr
	}
	vs.manifest, vs.manifestFile = nil, nil
	return err
}

// setCurrent atomically points CURRENT at manifest number num: it writes a
// temporary file, syncs it, renames it over CURRENT and syncs the directory.
func setCurrent(fs vfs.FS, dir string, num, tempNum uint64) error {
	tmp := makeFilename(dir, fileTypeTemp, tempNum)
	f, err := fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("set CURRENT: %w", err)
	}
	content := []byte(fmt.Sprintf("MANIFEST-%06d\n", num))
	_, err = f.Write(content)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, makeFilename(dir, fileTypeCurrent, 0))
	}
	if err == nil {
		err = vfs.SyncDir(fs, dir)
	}
	if err != nil {
		fs.Remove(tmp)
		return fmt.Errorf("set CURRENT to manifest %06d: %w", num, err)
	}
	return nil
}

// addLiveFiles adds to live the numbers of every table in the current version.
func (vs *versionSet) addLiveFiles(live map[uint64]bool) {
	for _, files := range vs.current.levels {
		for _, f := range files {
			live[f.fileNum] = true
		}
	}
}
