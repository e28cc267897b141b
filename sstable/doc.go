// Package sstable writes and reads the engine's immutable sorted table
// files.
//
// A table holds internal keys (user key plus sequence-number/kind trailer)
// in InternalCompare order with their values. A Writer builds one from
// strictly increasing entries; a Reader serves point lookups (Get, after a
// bloom filter check) and bounded forward and reverse iteration
// (NewIter, a base.InternalIterator).
//
// The file is a sequence of blocks followed by a fixed-size footer:
//
//	data block 0 .. data block n-1 | filter | index | properties | footer
//
// Data blocks (about BlockSize bytes before compression) hold prefix
// compressed entries with restart points. The filter is a cache-local bloom
// filter over every distinct user key and, when WriterOptions.Split is set,
// every distinct key prefix. The index maps a separator key per data block
// to the block's position. Every block is followed by a trailer naming its
// compression (none, S2 or zstd) and an xxhash64 checksum, verified on
// every read. docs/sstable.md describes every byte.
//
// Readers keep the index and filter in memory and read data blocks through
// an optional Cache shared by all tables. Blocks are immutable once read, so
// values returned by Get alias cached blocks without copying and remain
// valid for as long as they are held. An iterator reading data blocks
// from the file in order prefetches the range ahead when the file can
// (readahead.go): the engine opens tables for random reads, with the
// kernel's own readahead off.
package sstable
