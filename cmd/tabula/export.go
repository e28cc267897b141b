package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tabuladb/tabula/export"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// openStoreExclusive opens the store in dir for a tool (export, import),
// saying clearly when a server holds it. With mustExist, a directory
// without a store is refused instead of a new store being made there.
func openStoreExclusive(dir string, mustExist bool) (*partition.Store, error) {
	if mustExist {
		if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
			return nil, fmt.Errorf("%s holds no store: %w", dir, err)
		}
	}
	s, err := partition.Open(dir, nil)
	if err != nil {
		if isLockHeld(err) {
			return nil, fmt.Errorf("the store in %s is held by a running server (or another tool): stop it first; export and import open the store themselves", dir)
		}
		return nil, err
	}
	return s, nil
}

// exportCommand is `tabula export [--data DIR] [--table T ...] OUT.jsonl`.
func exportCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("export", "usage: tabula export [--data DIR] [--table T ...] OUT.jsonl\n\nWrites every table (or those named) with all its entities to OUT.jsonl, one\nJSON object per line (docs/export.md); OUT \"-\" is standard output.", stderr)
	data := fs.String("data", "./tabula-data", "the store directory (no server may hold it)")
	var tables stringList
	fs.Var(&tables, "table", "export only this table (repeatable): NAME in any account, or ACCOUNT/NAME; case-insensitive")
	if !parseArgs(fs, args, 1) {
		return 2
	}
	out := fs.Arg(0)
	s, err := openStoreExclusive(*data, true)
	if err != nil {
		fmt.Fprintf(stderr, "tabula export: %v\n", err)
		return 1
	}
	defer s.Close()
	matches := func(want string, t partition.TableRef) bool {
		acct, name, ok := strings.Cut(want, "/")
		if !ok {
			acct, name = "", want
		}
		return (acct == "" || acct == t.Account) && strings.EqualFold(name, t.Name)
	}
	include := func(t partition.TableRef) bool {
		if len(tables) == 0 {
			return true
		}
		for _, want := range tables {
			if matches(want, t) {
				return true
			}
		}
		return false
	}
	all, err := s.AllTables()
	if err != nil {
		fmt.Fprintf(stderr, "tabula export: list the tables of %s: %v\n", *data, err)
		return 1
	}
	for _, want := range tables {
		found := false
		for _, t := range all {
			found = found || matches(want, t)
		}
		if !found {
			fmt.Fprintf(stderr, "tabula export: no table %q in %s\n", want, *data)
			return 1
		}
	}

	var w io.Writer = stdout
	var f *os.File
	tmp := ""
	if out != "-" {
		// Written beside OUT and renamed at the end: OUT is whole or absent.
		f, err = os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".partial-")
		if err != nil {
			fmt.Fprintf(stderr, "tabula export: %v\n", err)
			return 1
		}
		tmp = f.Name()
		defer os.Remove(tmp)
		w = f
	}
	start := time.Now()
	nt, ne, err := export.Export(context.Background(), s, w, include)
	if err == nil && f != nil {
		err = f.Sync()
	}
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil && tmp != "" {
		err = os.Rename(tmp, out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tabula export: %v\n", err)
		return 1
	}
	msgOut := stdout
	if out == "-" {
		msgOut = stderr
	}
	fmt.Fprintf(msgOut, "exported %d tables, %d entities from %s to %s in %s\n", nt, ne, *data, out, time.Since(start).Round(time.Millisecond))
	return 0
}

// importProgress is the progress file of an import, written beside the
// input (or where --progress says) after committed batches, and removed
// when the import completes. It names the input by size and checksum, so
// that it is never applied to another file.
type importProgress struct {
	Version  int    `json:"version"`
	Input    string `json:"input"`
	Size     int64  `json:"size"`
	XXHash   string `json:"xxhash64"`
	Data     string `json:"data"`
	NextLine int    `json:"next_line"`
	Entities int64  `json:"entities"`
}

// importCommand is `tabula import --data DIR IN.jsonl`.
func importCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("import", "usage: tabula import --data DIR [--progress FILE] [--restart] IN.jsonl\n\nChecks the whole export file, then loads it into the store in batches per\npartition; run it again after an interruption and it resumes.", stderr)
	data := fs.String("data", "./tabula-data", "the store directory, created if missing (no server may hold it)")
	progressPath := fs.String("progress", "", "the progress file that makes an interrupted import resumable (default IN.jsonl.progress)")
	restart := fs.Bool("restart", false, "ignore an existing progress file and import from the first line")
	if !parseArgs(fs, args, 1) {
		return 2
	}
	in := fs.Arg(0)
	if *progressPath == "" {
		*progressPath = in + ".progress"
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "tabula import: "+format+"\n", a...)
		return 1
	}

	f, err := os.Open(in)
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()
	sum, err := export.Check(f)
	if err != nil {
		return fail("%s: %v (nothing was imported)", in, err)
	}
	absData, _ := filepath.Abs(*data)
	prog := importProgress{Version: 1, Input: in, Size: sum.Size, XXHash: fmt.Sprintf("%016x", sum.XXHash), Data: absData, NextLine: 1}
	if b, err := os.ReadFile(*progressPath); err == nil && !*restart {
		var old importProgress
		if err := json.Unmarshal(b, &old); err != nil || old.Version != 1 {
			return fail("progress file %s is unreadable (%v): remove it, or pass --restart to import from the first line", *progressPath, err)
		}
		if old.Size != prog.Size || old.XXHash != prog.XXHash || old.Data != prog.Data {
			return fail("progress file %s belongs to another input or store (%s into %s): remove it, or pass --restart", *progressPath, old.Input, old.Data)
		}
		prog.NextLine, prog.Entities = old.NextLine, old.Entities
		fmt.Fprintf(stdout, "resuming the import of %s at line %d (%d entities were imported before)\n", in, prog.NextLine, prog.Entities)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail("%v", err)
	}

	s, err := openStoreExclusive(*data, false)
	if err != nil {
		return fail("%v", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		s.Close()
		return fail("%v", err)
	}
	start := time.Now()
	base := prog.Entities
	var lastWrite time.Time
	st, err := export.Import(context.Background(), s, f, export.ImportOptions{
		ResumeLine: prog.NextLine,
		Progress: func(next int, n int64) error {
			prog.NextLine, prog.Entities = next, base+n
			if time.Since(lastWrite) < 200*time.Millisecond {
				return nil
			}
			lastWrite = time.Now()
			return writeProgress(*progressPath, &prog)
		},
	})
	if cerr := s.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		// Everything before prog.NextLine is stored: record it.
		if perr := writeProgress(*progressPath, &prog); perr != nil {
			fmt.Fprintf(stderr, "tabula import: %v\n", perr)
		}
		return fail("%s: %v\n(run the same command again to resume at line %d)", in, err, prog.NextLine)
	}
	os.Remove(*progressPath)
	fmt.Fprintf(stdout, "imported %s into %s: %d tables created, %d entities in %d batches, in %s\n",
		in, *data, st.Tables, st.Entities, st.Batches, time.Since(start).Round(time.Millisecond))
	return 0
}

// writeProgress replaces the progress file atomically and durably.
func writeProgress(path string, p *importProgress) error {
	b, _ := json.Marshal(p)
	if err := vfs.WriteFileAtomic(vfs.Default(), path, append(b, '\n')); err != nil {
		return fmt.Errorf("progress file: %w", err)
	}
	return nil
}
