package lsm

import (
	"errors"

	"github.com/tabuladb/tabula/internal/base"
)

var (
	// ErrNotFound is returned by Get when the key has no live value.
	ErrNotFound = errors.New("lsm: not found")
	// ErrClosed is returned by operations on a closed DB.
	ErrClosed = errors.New("lsm: closed")
	// ErrStopped is wrapped, together with the original failure, by the
	// error of every write, Flush and Compact refused because an earlier
	// WAL write or sync, flush or compaction failed (see DB.Err). Nothing
	// unacknowledged is lost by it: reopen the DB once the disk is
	// healthy.
	ErrStopped = errors.New("lsm: writes stopped by an earlier failure")
	// ErrInvalidOptions is wrapped by Open's and Options.Validate's error
	// for options out of range; the error names each field.
	ErrInvalidOptions = errors.New("lsm: invalid options")
	// ErrCorruption is wrapped by every error caused by data on disk that
	// fails a checksum or cannot be decoded; the wrapping error names the
	// file and offset.
	ErrCorruption = base.ErrCorruption
)
