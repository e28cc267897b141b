// Package batch reads and writes the $batch format of the Table service:
// entity group transactions, sent as a multipart/mixed body holding one
// change set of HTTP sub-requests, answered by a multipart/mixed body of
// HTTP sub-responses.
//
// Parse turns a request body into Operations (method, URL, headers, body)
// within the service's limits; ParseTarget splits a table-service URL path
// into table name and keys, for sub-requests and the main router alike;
// ResponseWriter renders the response with the exact framing the Azure SDKs
// parse. docs/batch.md describes both formats with annotated examples.
//
// The package knows nothing of storage: running the operations atomically
// is the caller's job.
package batch
