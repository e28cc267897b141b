module github.com/tabuladb/tabula

go 1.26

require (
	github.com/bits-and-blooms/bitset v1.24.2
	github.com/bits-and-blooms/bloom/v3 v3.7.1
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/klauspost/compress v1.20.3
)
