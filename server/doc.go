// Package server is Tabula's REST front end: the Azure Table service API
// over HTTP, as the official SDKs and the Azurite emulator speak it, on a
// partition.Store.
//
// URLs are path-style, as the emulator serves them: the account is the
// first path segment (/devstoreaccount1/Tables, /devstoreaccount1/t(...)),
// optionally with the "-secondary" suffix of the read-access geo endpoint;
// or production-style, the account named by the Host's first label
// (devstoreaccount1.table.localhost).
// Each request is authenticated (Shared Key, Shared Key Lite, account or
// service SAS, Entra ID bearer tokens; server/auth), checked against the operation it performs,
// and answered with the service's headers and, on failure, its status,
// x-ms-error-code header and error body: JSON for the OData operations, XML
// for ACLs and service properties. Entity group transactions are parsed
// and framed by server/batch, XML documents by server/storagexml; the
// table semantics are the partition package's. SetAccounts replaces the
// accounts and keys of a running server at once, for key rotation: each
// request authenticates against the set in force when it arrived
// (docs/accounts.md).
//
// The handler never panics to a client: a panic becomes a logged 500
// InternalError. Request bodies are capped (4 MiB, the service's batch
// limit; entities are further limited to 1 MiB by the store), and Serve
// runs on net/http, over TLS when configured, with header, read, write and
// idle timeouts and a connection cap, so a slow or numerous client cannot
// hold the server (docs/http.md).
//
// With Options.Limits or Options.Faults, an emulator stands between the
// handlers and the store and does what the service does to a busy or
// unlucky client: 503 ServerBusy past the per-partition and per-account
// rates, queries scanning at them, and injected failures, latency and
// outages (docs/limits.md, docs/faults.md). Without them there is no
// emulator and requests run as before.
//
// Options.Observer is told about every answered request (RequestInfo):
// AccessLog writes the access log from it, and package metrics counts
// it; the server itself knows nothing of Prometheus. Without an observer
// a request pays nothing for them (docs/metrics.md).
package server
