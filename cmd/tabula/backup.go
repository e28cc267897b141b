package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tabuladb/tabula/backup"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/vfs"
)

// backupCommand is `tabula backup --data DIR OUT`: a consistent copy of the
// store in DIR, online when a server holds it (through the server's admin
// socket), else by opening the store itself. docs/backup.md.
func backupCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("backup", "usage: tabula backup [--data DIR] OUT\n\nCopies the store in DIR into the new directory OUT, as of one moment, while a\nserver keeps serving it (or with no server running).", stderr)
	data := fs.String("data", "./tabula-data", "the store directory to back up")
	if !parseArgs(fs, args, 1) {
		return 2
	}
	out := filepath.Clean(fs.Arg(0))
	start := time.Now()
	x, online, err := runBackup(*data, out)
	if err != nil {
		fmt.Fprintf(stderr, "tabula backup: %v\n", err)
		return 1
	}
	var bytes int64
	for _, f := range x.Files {
		bytes += f.Size
	}
	how := "no server held the store; it was opened for the backup"
	if online {
		how = "online, through the running server"
	}
	fmt.Fprintf(stdout, "backed up %s to %s at sequence number %d: %d files, %d bytes, in %s (%s)\n",
		*data, out, x.Seq, len(x.Files), bytes, time.Since(start).Round(time.Millisecond), how)
	return 0
}

// runBackup makes the backup: a checkpoint into a temporary directory
// beside out, sealed with its index, then renamed to out.
func runBackup(data, out string) (*backup.Index, bool, error) {
	if _, err := os.Stat(filepath.Join(data, "CURRENT")); err != nil {
		return nil, false, fmt.Errorf("%s holds no store: %w", data, err)
	}
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 {
		return nil, false, fmt.Errorf("%s exists and is not empty: back up into a new directory", out)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	parent := filepath.Dir(out)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, false, err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(out)+".partial-")
	if err != nil {
		return nil, false, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	tmp, err = filepath.Abs(tmp)
	if err != nil {
		return nil, false, err
	}

	online := true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	seq, err := requestCheckpoint(ctx, data, tmp)
	if errors.Is(err, errNoAdmin) {
		online = false
		seq, err = offlineCheckpoint(data, tmp, err)
	}
	if err != nil {
		return nil, online, err
	}
	x, err := backup.Seal(tmp, seq)
	if err != nil {
		return nil, online, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, online, err
	}
	done = true
	if d, err := os.Open(parent); err == nil {
		d.Sync()
		d.Close()
	}
	return x, online, nil
}

// offlineCheckpoint opens the store (nobody serves it) and checkpoints it.
// If another process holds it without an admin socket, it says so.
func offlineCheckpoint(data, dir string, adminErr error) (uint64, error) {
	store, err := partition.Open(data, nil)
	if err != nil {
		if isLockHeld(err) {
			return 0, fmt.Errorf("the store in %s is held by a running process that offers no admin socket (%v): "+
				"stop it and back up again, or run a server that offers one", data, adminErr)
		}
		return 0, fmt.Errorf("open the store to back it up: %w", err)
	}
	seq, err := store.DB().Checkpoint(dir)
	if cerr := store.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return seq, err
}

// isLockHeld reports whether err is the refusal of a store's lock.
func isLockHeld(err error) bool { return errors.Is(err, vfs.ErrLocked) }

// restoreCommand is `tabula restore BACKUP DIR`.
func restoreCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("restore", "usage: tabula restore BACKUP DIR\n\nChecks the backup in BACKUP and restores it into DIR, which must not exist or be empty.", stderr)
	if !parseArgs(fs, args, 2) {
		return 2
	}
	x, err := backup.Restore(fs.Arg(0), fs.Arg(1))
	if err != nil {
		fmt.Fprintf(stderr, "tabula restore: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "restored %s into %s: %d files, as of sequence number %d\n", fs.Arg(0), fs.Arg(1), len(x.Files), x.Seq)
	return 0
}
