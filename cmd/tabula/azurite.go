package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tabuladb/tabula/azurite"
)

// importAzuriteCommand is `tabula import-azurite PATH [--data DIR]`: the
// emulator's table database (PATH is the file, or the emulator's
// --location directory holding it) into the store in DIR.
func importAzuriteCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("import-azurite", fmt.Sprintf("usage: tabula import-azurite [--data DIR] PATH\n\nLoads every account's tables and entities from the Azurite emulator's table\ndatabase (PATH: %s, or the emulator's --location directory).\nStop the emulator first (Ctrl-C, which saves the database).", azurite.FileName), stderr)
	data := fs.String("data", "./tabula-data", "the store directory, created if missing (no server may hold it)")
	path, ok := parseOneArg(fs, args)
	if !ok {
		return 2
	}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		path = filepath.Join(path, azurite.FileName)
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "tabula import-azurite: "+format+"\n", a...)
		return 1
	}
	f, err := os.Open(path)
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()
	// Read it all once first: a damaged file is refused before anything
	// is written.
	var tables, entities int
	if err := azurite.Read(f, func(it azurite.Item) error {
		if it.Kind == azurite.KindTable {
			tables++
		} else {
			entities++
		}
		return nil
	}); err != nil {
		return fail("%s: %v (nothing was imported)", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fail("%v", err)
	}
	s, err := openStoreExclusive(*data, false)
	if err != nil {
		return fail("%v", err)
	}
	start := time.Now()
	st, err := azurite.Load(context.Background(), s, f)
	if cerr := s.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fail("%s: %v\n(the batches before the failure are stored; running the import again is safe)", path, err)
	}
	fmt.Fprintf(stdout, "imported %s into %s: %d tables (%d created), %d entities in %d batches, in %s\n",
		path, *data, st.Tables, st.TablesCreated, st.Entities, st.Batches, time.Since(start).Round(time.Millisecond))
	return 0
}
