// Package odata is the table service's data model and query language: the
// Edm types and values, the binary form in which an entity's properties are
// stored, the OData v3 JSON ("JSON light") entity codec at each metadata
// level, and the $filter, $select and $top query options.
//
// A $filter is parsed into a typed AST (ParseFilter), then compiled into a
// Plan: the (PartitionKey, RowKey) ranges the filter can match, for the
// partition layer to turn into storage scans, and a residual predicate that
// is evaluated directly on the stored bytes of each candidate entity without
// decoding it.
//
// The package holds no storage and no HTTP: the partition layer owns keys and
// the server layer owns headers. Errors that should reach a client are *Error
// values carrying the Azure Table service error code.
package odata
