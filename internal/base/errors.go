package base

import "errors"

// ErrCorruption marks data that fails a checksum or cannot be decoded. Every
// engine package wraps it with the file and offset where it was found, so
// errors.Is(err, ErrCorruption) holds for all of them.
var ErrCorruption = errors.New("corruption")
