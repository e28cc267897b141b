package vfs

// Crash clones: what a power loss would leave of a MemFS.
//
// A POSIX filesystem promises little about data that was not synced. A
// file's contents are durable up to its last fsync; a name (a created,
// renamed or removed file, a created directory) is durable once the
// directory holding it has been fsynced. MemFS tracks exactly that much:
// every memFile remembers how much of it was synced, and each directory
// sync records which names the directory then held (durable and
// durableDirs). CrashClone builds a filesystem out of that durable state
// alone, so a test can take one at any moment of a workload and check
// that the code under test recovers from it.
//
// Unsynced appends are dropped, or, with a random source, cut at a random
// point: a disk that wrote part of what it was given before power failed
// (a torn write). A reused file (MemFS.Reuse) keeps its old content past
// what of its new writes survived. The model assumes a disk persists a file's data in
// order, as appends reach the disk on common filesystems; it does not
// model reordered or corrupted sectors (the corruption tests do that).

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"sort"
)

// CrashClone returns the filesystem a power loss at this moment would
// leave: only the names made durable by a sync of their directory (files
// and directories alike, each directory's ancestors too), each file
// holding the data it had at its last Sync. When rng is not nil, each file
// also keeps a random prefix of its unsynced tail, as a disk that wrote
// part of it before power failed; the choices depend only on rng and the
// filesystem's state, so a seeded rng reproduces a clone.
//
// The clone is atomic: writes and syncs running concurrently (a DB's
// background work) land either wholly before or wholly after it. Locks are
// not cloned: a crash releases them.
func (m *MemFS) CrashClone(rng *rand.Rand) *MemFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := NewMem()
	for d := range m.dirs {
		if m.dirSurvivesLocked(d) {
			out.dirs[d], out.durableDirs[d] = true, true
		}
	}
	names := make([]string, 0, len(m.durable))
	for name := range m.durable {
		if out.dirs[filepath.Dir(name)] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	// Hold every file still while copying, so the clone is one instant.
	locked := map[*memFile]bool{}
	for _, name := range names {
		if f := m.durable[name]; !locked[f] {
			f.mu.RLock()
			locked[f] = true
		}
	}
	defer func() {
		for f := range locked {
			f.mu.RUnlock()
		}
	}()
	clones := map[*memFile]*memFile{}
	for _, name := range names {
		f := m.durable[name]
		c, ok := clones[f]
		if !ok {
			n := f.synced
			if rng != nil && len(f.data) > n {
				n += rng.IntN(len(f.data) - n + 1)
			}
			data := bytes.Clone(f.data[:n])
			if len(f.under) > n {
				// A reused file: past what reached the disk, its old
				// content.
				data = append(data, f.under[n:]...)
			}
			c = &memFile{data: data, synced: len(data)}
			clones[f] = c
		}
		out.files[name] = c
		out.durable[name] = c
	}
	return out
}

// dirSurvivesLocked reports whether directory d and all its ancestors are
// durable entries of their parents.
func (m *MemFS) dirSurvivesLocked(d string) bool {
	for {
		if !m.durableDirs[d] {
			return false
		}
		parent := filepath.Dir(d)
		if parent == d {
			return true
		}
		d = parent
	}
}

// syncDir makes the entries of dir durable: the files and directories it
// holds now survive a crash, and the names it no longer holds do not.
func (m *MemFS) syncDir(dir string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.durable {
		if filepath.Dir(name) == dir {
			delete(m.durable, name)
		}
	}
	for name, f := range m.files {
		if filepath.Dir(name) == dir {
			m.durable[name] = f
		}
	}
	for d := range m.dirs {
		if d != dir && filepath.Dir(d) == dir {
			m.durableDirs[d] = true
		}
	}
}
