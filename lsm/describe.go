package lsm

import (
	"fmt"
	"slices"

	"github.com/tabuladb/tabula/vfs"
)

// TableInfo describes one sstable of a level.
type TableInfo struct {
	FileNum                 uint64
	Size                    uint64
	Smallest, Largest       []byte // user keys
	SmallestSeq, LargestSeq uint64
}

// Description is what a DB directory holds, read without opening the DB.
type Description struct {
	Manifest    string
	LogNum      uint64 // WAL segments from this number on hold unflushed writes
	NextFileNum uint64
	LastSeq     uint64
	Levels      [NumLevels][]TableInfo
	WALs        []uint64 // segments present, ascending
}

// Describe reads the manifest of the DB in dir and lists its tables and WAL
// segments. It writes nothing and takes no lock, so it works on a DB that
// another process has open (showing the state of its last manifest edit).
// A nil fs means the OS filesystem.
func Describe(dir string, fs vfs.FS) (*Description, error) {
	if fs == nil {
		fs = vfs.Default()
	}
	opts := (&Options{FS: fs}).withDefaults()
	vs := newVersionSet(dir, &opts, nil, nil)
	exists, err := vs.load()
	if err != nil {
		return nil, fmt.Errorf("lsm: describe %s: %w", dir, err)
	}
	if !exists {
		return nil, fmt.Errorf("lsm: describe %s: no database (CURRENT is missing)", dir)
	}
	d := &Description{
		Manifest:    makeFilename(dir, fileTypeManifest, vs.manifestNum),
		LogNum:      vs.logNum,
		NextFileNum: vs.nextFileNum,
		LastSeq:     uint64(vs.lastSeq),
	}
	for level, files := range vs.current.levels {
		for _, f := range files {
			d.Levels[level] = append(d.Levels[level], TableInfo{
				FileNum:     f.fileNum,
				Size:        f.size,
				Smallest:    f.smallest.UserKey,
				Largest:     f.largest.UserKey,
				SmallestSeq: uint64(f.smallestSeq),
				LargestSeq:  uint64(f.largestSeq),
			})
		}
	}
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("lsm: describe %s: %w", dir, err)
	}
	for _, name := range names {
		if ft, num := parseFilename(name); ft == fileTypeLog {
			d.WALs = append(d.WALs, num)
		}
	}
	slices.Sort(d.WALs)
	return d, nil
}
