// Package storagexml reads, validates and writes the XML documents of the
// Table service's account-level operations: service properties (logging,
// metrics, CORS rules; Get/Set Table Service Properties), stored access
// policies (Get/Set Table ACL), service statistics (Get Table Service
// Stats) and the XML error document those operations answer with. It also
// evaluates CORS rules for preflight and actual requests.
//
// Documents are written the way the service writes them: an XML
// declaration, then the elements in the service's order with no
// indentation, so SDK parsers and byte-level tests see what they would see
// from Azure.
package storagexml
