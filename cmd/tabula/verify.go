package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tabuladb/tabula/backup"
	"github.com/tabuladb/tabula/lsm"
)

// verifyCommand is `tabula verify --data DIR`: every checksum, record and
// key order of a store no process holds (lsm.Verify), and, in a backup
// directory, every file against the backup's index too.
func verifyCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("verify", "usage: tabula verify [--data DIR]\n\nChecks every block checksum, WAL record, manifest entry and key order of the\nstore in DIR, which no server may hold (verify a backup of a running one).\nExits 1 naming the first bad file and offset.", stderr)
	data := fs.String("data", "./tabula-data", "the store (or backup) directory to check")
	if !parseArgs(fs, args, 0) {
		return 2
	}
	dir := *data
	if _, err := os.Stat(filepath.Join(dir, "CURRENT")); err != nil {
		fmt.Fprintf(stderr, "tabula verify: %s holds no store: %v\n", dir, err)
		return 1
	}
	_, statErr := os.Stat(filepath.Join(dir, backup.IndexName))
	isBackup := statErr == nil
	if isBackup {
		x, err := backup.Check(dir)
		if err != nil {
			fmt.Fprintf(stderr, "tabula verify: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "backup index: %d files match %s (sequence number %d)\n", len(x.Files), backup.IndexName, x.Seq)
	}
	rep, err := lsm.Verify(dir, nil)
	if isBackup {
		os.Remove(filepath.Join(dir, "LOCK")) // Verify's; a backup has none
	}
	if err != nil {
		if isLockHeld(err) {
			fmt.Fprintf(stderr, "tabula verify: the store in %s is held by a running server: stop it, or verify a backup of it (tabula backup)\n", dir)
			return 1
		}
		var ve *lsm.VerifyError
		if errors.As(err, &ve) {
			fmt.Fprintf(stderr, "tabula verify: damage found: %v\n", err)
		} else {
			fmt.Fprintf(stderr, "tabula verify: %v\n", err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "ok: %s: %s with %d records; %d tables (%d entries); %d WAL segments (%d batches); last sequence number %d\n",
		dir, filepath.Base(rep.Manifest), rep.ManifestRecords, rep.Tables, rep.TableEntries, rep.WALSegments, rep.WALBatches, rep.LastSeq)
	for _, n := range rep.Notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	return 0
}
