package vfs

import (
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// SyncGate wraps a filesystem so that a test controls the fsyncs of the
// files whose base names contain a pattern (".log": the WAL; "MANIFEST-":
// the engine's manifests): each takes at least
// a delay, and after Hold the next one waits, once it has started, until
// Release, which also decides its result. It lets a test look at a store
// while a synced commit waits for the disk, or fail that commit's fsync at
// a moment of its choosing.
type SyncGate struct {
	FS
	pattern string
	delay   time.Duration
	mu      sync.Mutex
	hold    bool
	entered chan struct{}
	release chan error
}

// NewSyncGate wraps fs, gating the fsyncs of the files whose base names
// contain pattern, each slowed to at least delay.
func NewSyncGate(fs FS, pattern string, delay time.Duration) *SyncGate {
	return &SyncGate{FS: fs, pattern: pattern, delay: delay, entered: make(chan struct{}, 1), release: make(chan error, 1)}
}

// Hold makes the next gated fsync wait for Release.
func (g *SyncGate) Hold() {
	g.mu.Lock()
	g.hold = true
	g.mu.Unlock()
}

// Entered receives once the held fsync has started.
func (g *SyncGate) Entered() <-chan struct{} { return g.entered }

// Release lets the held fsync go on: with err nil it syncs, otherwise it
// fails with err (and syncs nothing).
func (g *SyncGate) Release(err error) { g.release <- err }

// Create opens a new file, gated when its base name has the pattern.
func (g *SyncGate) Create(name string) (File, error) {
	f, err := g.FS.Create(name)
	if err != nil || !strings.Contains(filepath.Base(name), g.pattern) {
		return f, err
	}
	return &gatedFile{File: f, g: g}, nil
}

// Reuse reuses a file as Create creates one, gated likewise.
func (g *SyncGate) Reuse(oldname, newname string) (File, error) {
	f, err := g.FS.Reuse(oldname, newname)
	if err != nil || !strings.Contains(filepath.Base(newname), g.pattern) {
		return f, err
	}
	return &gatedFile{File: f, g: g}, nil
}

type gatedFile struct {
	File
	g *SyncGate
}

func (f *gatedFile) Sync() error {
	g := f.g
	g.mu.Lock()
	hold := g.hold
	g.hold = false
	g.mu.Unlock()
	if hold {
		g.entered <- struct{}{}
		if err := <-g.release; err != nil {
			return err
		}
	}
	time.Sleep(g.delay)
	return f.File.Sync()
}
