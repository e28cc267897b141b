// Package auth decides who is calling the Table service and what they may do.
//
// It verifies the three credentials the Azure SDKs send — Shared Key and
// Shared Key Lite in the Authorization header, and shared access signatures
// (service SAS for one table, account SAS for the whole account) in the query
// string — against an account's two keys, and returns a Principal that the
// HTTP handlers then ask authorization questions: may this caller perform this
// operation on this table, may it touch this (PartitionKey, RowKey), which part
// of a query's key range may it see.
//
// The package holds no storage logic: stored access policies (the signed
// identifiers of Set Table ACL) are fetched through a callback the caller
// supplies. Keys never appear in errors, logs or String output.
package auth
