package main

import (
	"fmt"

	"github.com/tabuladb/tabula/lsm"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// inMemoryDir is where an in-memory store lives on its own filesystem.
const inMemoryDir = "/tabula-data"

// openInMemoryStore opens a new, empty store on an in-memory filesystem
// (vfs.NewMem): the emulator's --inMemoryPersistence, for tests that want
// a throw-away store. Nothing touches the disk, and everything is gone
// when the process exits. Each call returns an independent store.
//
// serve offers it as --in-memory (the change serve.go needs):
//
//	inMemory := fs.Bool("in-memory", false, "keep the store in memory only (nothing on disk; gone at exit), like the emulator's --inMemoryPersistence")
//	...
//	store, err := partition.Open(storeDir, nil)
//
// becomes
//
//	var store *partition.Store
//	if *inMemory {
//		store, err = openInMemoryStore()
//	} else {
//		store, err = partition.Open(storeDir, nil)
//	}
//
// (with --in-memory, --data is not used for the store; --https still keeps
// its certificate there, and the admin socket for backups is not started.)
func openInMemoryStore() (*partition.Store, error) {
	s, err := partition.Open(inMemoryDir, &partition.Options{LSM: lsm.Options{FS: vfs.NewMem()}})
	if err != nil {
		return nil, fmt.Errorf("open an in-memory store: %w", err)
	}
	return s, nil
}
