package server_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server/auth"
)

// badRequest is a malformed or hostile request and the service's answer.
type badRequest struct {
	name         string
	method, path string
	body         string
	header       []string // name, value pairs
	unsigned     bool     // send without credentials
	status       int
	code         string
}

func batchBody(parts ...string) string {
	var b strings.Builder
	b.WriteString("--batch_x\r\nContent-Type: multipart/mixed; boundary=changeset_y\r\n\r\n")
	for _, p := range parts {
		b.WriteString("--changeset_y\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" + p + "\r\n")
	}
	b.WriteString("--changeset_y--\r\n--batch_x--\r\n")
	return b.String()
}

func batchInsert(pk, rk string) string {
	return fmt.Sprintf("POST http://127.0.0.1/devstoreaccount1/items HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json;odata=nometadata\r\n\r\n{\"PartitionKey\":%q,\"RowKey\":%q}", pk, rk)
}

const batchCT = "multipart/mixed; boundary=batch_x"

func badRequests() []badRequest {
	long := strings.Repeat("k", 1025)
	big := strings.Repeat("x", 32*1024+1)
	manyProps := `{"PartitionKey":"p","RowKey":"many"`
	for i := range 253 {
		manyProps += fmt.Sprintf(`,"P%d":1`, i)
	}
	manyProps += "}"
	hugeEntity := `{"PartitionKey":"p","RowKey":"huge"`
	for i := range 24 { // 24 binaries of 48,000 bytes: 1.1 MiB
		hugeEntity += fmt.Sprintf(`,"B%d@odata.type":"Edm.Binary","B%d":"%s"`, i, i, strings.Repeat("QUFB", 16000))
	}
	hugeEntity += "}"
	ent := func(extra string) string { return `{"PartitionKey":"p","RowKey":"new"` + extra + `}` }
	ops := make([]string, 101)
	for i := range ops {
		ops[i] = batchInsert("b", fmt.Sprint(i))
	}
	const json = "application/json"
	return []badRequest{
		// Credentials and dates.
		{name: "no credentials", method: "GET", path: "/Tables", unsigned: true, status: 403, code: "AuthenticationFailed"},
		{name: "wrong key", method: "GET", path: "/Tables", header: []string{"Authorization", "SharedKeyLite devstoreaccount1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, unsigned: true, status: 403, code: "AuthenticationFailed"},
		{name: "malformed authorization", method: "GET", path: "/Tables", header: []string{"Authorization", "SharedKey nocolon"}, unsigned: true, status: 403, code: "AuthenticationFailed"},
		{name: "unknown scheme", method: "GET", path: "/Tables", header: []string{"Authorization", "Basic dXNlcjpwYXNz"}, unsigned: true, status: 403, code: "AuthenticationFailed"},
		{name: "other account in signature", method: "GET", path: "/Tables", header: []string{"Authorization", "SharedKeyLite otheraccount:AAAA"}, unsigned: true, status: 403, code: "AuthenticationFailed"},
		{name: "stale date", method: "GET", path: "/Tables", header: []string{"x-ms-date", time.Now().Add(-20 * time.Minute).UTC().Format(http.TimeFormat)}, status: 403, code: "AuthenticationFailed"},
		{name: "future date", method: "GET", path: "/Tables", header: []string{"x-ms-date", time.Now().Add(20 * time.Minute).UTC().Format(http.TimeFormat)}, status: 403, code: "AuthenticationFailed"},
		{name: "garbage date", method: "GET", path: "/Tables", header: []string{"x-ms-date", "yesterday"}, status: 403, code: "AuthenticationFailed"},
		{name: "SAS with bad signature", method: "GET", path: "/items()?sv=2019-02-02&tn=items&sp=r&se=2099-01-01T00%3A00%3A00Z&sig=AAAA", unsigned: true, status: 403, code: "AuthenticationFailed"},
		{name: "expired SAS", method: "GET", path: "/items()?sv=2019-02-02&tn=items&sp=r&se=2001-01-01T00%3A00%3A00Z&sig=AAAA", unsigned: true, status: 403, code: "AuthenticationFailed"},

		// Versions and formats.
		{name: "future x-ms-version", method: "GET", path: "/Tables", header: []string{"x-ms-version", "2099-01-01"}, status: 400, code: "InvalidHeaderValue"},
		{name: "garbage x-ms-version", method: "GET", path: "/Tables", header: []string{"x-ms-version", "latest"}, status: 400, code: "InvalidHeaderValue"},
		{name: "JSON before 2013-08-15", method: "GET", path: "/Tables", header: []string{"x-ms-version", "2011-08-18"}, status: 415, code: "JsonFormatNotSupported"},
		{name: "Atom accept", method: "GET", path: "/Tables", header: []string{"Accept", "application/atom+xml"}, status: 415, code: "AtomFormatNotSupported"},
		{name: "bad $format", method: "GET", path: "/Tables?$format=xml", status: 400, code: "InvalidQueryParameterValue"},
		{name: "bad query escape", method: "GET", path: "/items()?$filter=%zz", status: 400, code: "InvalidQueryParameterValue"},

		// URLs and verbs.
		{name: "PUT on Tables", method: "PUT", path: "/Tables", body: "{}", status: 405, code: "MethodNotAllowed"},
		{name: "DELETE on Tables", method: "DELETE", path: "/Tables", status: 405, code: "MethodNotAllowed"},
		{name: "PUT on an entity set", method: "PUT", path: "/items", body: "{}", status: 405, code: "UnsupportedHttpVerb"},
		{name: "POST on an entity", method: "POST", path: "/items(PartitionKey='p',RowKey='r')", body: "{}", status: 405, code: "UnsupportedHttpVerb"},
		{name: "GET on $batch", method: "GET", path: "/$batch", status: 405, code: "UnsupportedHttpVerb"},
		{name: "unclosed key", method: "GET", path: "/items(PartitionKey='p", status: 400, code: "InvalidUri"},
		{name: "RowKey without PartitionKey", method: "GET", path: "/items(RowKey='r')", status: 400, code: "InvalidUri"},
		{name: "unknown key name", method: "GET", path: "/items(Foo='p',RowKey='r')", status: 400, code: "InvalidUri"},
		{name: "extra segment", method: "GET", path: "/items/more/segments", status: 400, code: "InvalidUri"},
		{name: "service without restype", method: "GET", path: "/?comp=properties", status: 400, code: "InvalidQueryParameterValue"},
		{name: "service with bad comp", method: "GET", path: "/?restype=service&comp=nope", status: 400, code: "InvalidQueryParameterValue"},
		{name: "DELETE on properties", method: "DELETE", path: "/?restype=service&comp=properties", status: 405, code: "UnsupportedHttpVerb"},
		{name: "bad comp on a table", method: "GET", path: "/items?comp=nope", status: 400, code: "InvalidQueryParameterValue"},
		{name: "X-HTTP-Method on GET", method: "GET", path: "/items(PartitionKey='p',RowKey='r')", header: []string{"X-HTTP-Method", "MERGE"}, status: 400, code: "XMethodNotUsingPost"},
		{name: "unknown X-HTTP-Method", method: "POST", path: "/items(PartitionKey='p',RowKey='r')", header: []string{"X-HTTP-Method", "FROB"}, status: 400, code: "XMethodIncorrectValue"},

		// Tables.
		{name: "duplicate table", method: "POST", path: "/Tables", body: `{"TableName":"Items"}`, status: 409, code: "TableAlreadyExists"},
		{name: "table name too short", method: "POST", path: "/Tables", body: `{"TableName":"ab"}`, status: 400, code: "OutOfRangeInput"},
		{name: "table name with a dash", method: "POST", path: "/Tables", body: `{"TableName":"my-table"}`, status: 400, code: "InvalidResourceName"},
		{name: "table name starting with a digit", method: "POST", path: "/Tables", body: `{"TableName":"9lives"}`, status: 400, code: "InvalidResourceName"},
		{name: "reserved table name", method: "POST", path: "/Tables", body: `{"TableName":"tables"}`, status: 400, code: "InvalidResourceName"},
		{name: "table body not JSON", method: "POST", path: "/Tables", body: `TableName=x`, status: 400, code: "InvalidInput"},
		{name: "table body without a name", method: "POST", path: "/Tables", body: `{}`, status: 400, code: "PropertiesNeedValue"},
		// A URL naming one resource finds it missing; a table's entity set
		// finds the table missing (Azure/Azurite#748; azure-sdk-for-net#46430).
		{name: "delete a missing table", method: "DELETE", path: "/Tables('missing')", status: 404, code: "ResourceNotFound"},
		{name: "get a missing table", method: "GET", path: "/Tables('missing')", status: 404, code: "ResourceNotFound"},
		{name: "get an entity of a missing table", method: "GET", path: "/missing(PartitionKey='p',RowKey='r')", status: 404, code: "ResourceNotFound"},
		{name: "delete an entity of a missing table", method: "DELETE", path: "/missing(PartitionKey='p',RowKey='r')", header: []string{"If-Match", "*"}, status: 404, code: "ResourceNotFound"},
		{name: "upsert into a missing table", method: "PUT", path: "/missing(PartitionKey='p',RowKey='r')", body: `{}`, status: 404, code: "ResourceNotFound"},
		{name: "bad table filter", method: "GET", path: "/Tables?$filter=TableName%20eq", status: 400, code: "InvalidInput"},
		{name: "bad NextTableName", method: "GET", path: "/Tables?NextTableName=%21%21%21", status: 400, code: "InvalidInput"},

		// Entity bodies.
		{name: "broken JSON", method: "POST", path: "/items", body: `{"PartitionKey":"p",`, status: 400, code: "InvalidInput"},
		{name: "JSON array", method: "POST", path: "/items", body: `[1,2]`, status: 400, code: "InvalidInput"},
		{name: "empty body insert", method: "POST", path: "/items", body: ``, status: 400, code: "InvalidInput"},
		{name: "missing RowKey", method: "POST", path: "/items", body: `{"PartitionKey":"p"}`, status: 400, code: "PropertiesNeedValue"},
		{name: "null PartitionKey", method: "POST", path: "/items", body: `{"PartitionKey":null,"RowKey":"r"}`, status: 400, code: "PropertiesNeedValue"},
		{name: "numeric PartitionKey", method: "POST", path: "/items", body: `{"PartitionKey":1,"RowKey":"r"}`, status: 400, code: "InvalidInput"},
		{name: "Int32 not a number", method: "POST", path: "/items", body: ent(`,"N@odata.type":"Edm.Int32","N":"abc"`), status: 400, code: "InvalidInput"},
		{name: "Int32 out of range", method: "POST", path: "/items", body: ent(`,"N@odata.type":"Edm.Int32","N":2147483648`), status: 400, code: "InvalidInput"},
		{name: "Int64 out of range", method: "POST", path: "/items", body: ent(`,"N@odata.type":"Edm.Int64","N":"9223372036854775808"`), status: 400, code: "InvalidInput"},
		{name: "unknown Edm type", method: "POST", path: "/items", body: ent(`,"N@odata.type":"Edm.Decimal","N":"1"`), status: 400, code: "InvalidValueType"},
		{name: "bad Guid", method: "POST", path: "/items", body: ent(`,"G@odata.type":"Edm.Guid","G":"not-a-guid"`), status: 400, code: "InvalidInput"},
		{name: "bad DateTime", method: "POST", path: "/items", body: ent(`,"T@odata.type":"Edm.DateTime","T":"2024-13-01T00:00:00Z"`), status: 400, code: "InvalidInput"},
		{name: "DateTime before 1601", method: "POST", path: "/items", body: ent(`,"T@odata.type":"Edm.DateTime","T":"1600-12-31T23:59:59Z"`), status: 400, code: "OutOfRangeInput"},
		{name: "bad base64", method: "POST", path: "/items", body: ent(`,"B@odata.type":"Edm.Binary","B":"***"`), status: 400, code: "InvalidInput"},
		{name: "object value", method: "POST", path: "/items", body: ent(`,"O":{"a":1}`), status: 400, code: "InvalidValueType"},
		{name: "array value", method: "POST", path: "/items", body: ent(`,"A":[1]`), status: 400, code: "InvalidValueType"},
		{name: "invalid UTF-8", method: "POST", path: "/items", body: ent(",\"S\":\"\xff\xfe\""), status: 400, code: "InvalidInput"},
		{name: "duplicate property", method: "POST", path: "/items", body: ent(`,"A":1,"A":2`), status: 400, code: "DuplicatePropertiesSpecified"},
		{name: "property name with a space", method: "POST", path: "/items", body: ent(`,"a b":1`), status: 400, code: "PropertyNameInvalid"},
		{name: "property name too long", method: "POST", path: "/items", body: ent(`,"` + strings.Repeat("n", 256) + `":1`), status: 400, code: "PropertyNameTooLong"},
		{name: "too many properties", method: "POST", path: "/items", body: manyProps, status: 400, code: "TooManyProperties"},
		{name: "string over 64 KiB", method: "POST", path: "/items", body: ent(`,"S":"` + big + big + `"`), status: 400, code: "PropertyValueTooLarge"},
		{name: "entity over 1 MiB", method: "POST", path: "/items", body: hugeEntity, status: 400, code: "EntityTooLarge"},
		{name: "body over 4 MiB", method: "POST", path: "/items", body: ent(`,"S":"` + strings.Repeat("x", 4<<20) + `"`), status: 413, code: "RequestBodyTooLarge"},
		{name: "RowKey with a slash", method: "POST", path: "/items", body: `{"PartitionKey":"p","RowKey":"a/b"}`, status: 400, code: "OutOfRangeInput"},
		{name: "PartitionKey with a hash", method: "POST", path: "/items", body: `{"PartitionKey":"a#b","RowKey":"r"}`, status: 400, code: "OutOfRangeInput"},
		{name: "RowKey with a control character", method: "POST", path: "/items", body: `{"PartitionKey":"p","RowKey":"a\u0007b"}`, status: 400, code: "OutOfRangeInput"},
		{name: "key over 1 KiB", method: "POST", path: "/items", body: `{"PartitionKey":"p","RowKey":"` + long + `"}`, status: 400, code: "KeyValueTooLarge"},
		{name: "insert existing", method: "POST", path: "/items", body: `{"PartitionKey":"p","RowKey":"r"}`, status: 409, code: "EntityAlreadyExists"},
		{name: "insert into a missing table", method: "POST", path: "/missing", body: ent(""), status: 404, code: "TableNotFound"},

		// Conditions.
		{name: "If-None-Match on PUT", method: "PUT", path: "/items(PartitionKey='p',RowKey='r')", body: `{}`, header: []string{"If-None-Match", "*"}, status: 400, code: "InvalidInput"},
		{name: "malformed If-Match", method: "PUT", path: "/items(PartitionKey='p',RowKey='r')", body: `{}`, header: []string{"If-Match", "MalformedETag"}, status: 400, code: "InvalidInput"},
		{name: "stale If-Match", method: "PUT", path: "/items(PartitionKey='p',RowKey='r')", body: `{}`, header: []string{"If-Match", `W/"datetime'2001-01-01T00%3A00%3A00.0000000Z'"`}, status: 412, code: "UpdateConditionNotSatisfied"},
		{name: "merge with If-Match * on a missing entity", method: "MERGE", path: "/items(PartitionKey='p',RowKey='none')", body: `{}`, header: []string{"If-Match", "*"}, status: 404, code: "ResourceNotFound"},
		{name: "DELETE without If-Match", method: "DELETE", path: "/items(PartitionKey='p',RowKey='r')", status: 400, code: "MissingRequiredHeader"},
		{name: "DELETE of a missing entity", method: "DELETE", path: "/items(PartitionKey='p',RowKey='none')", header: []string{"If-Match", "*"}, status: 404, code: "ResourceNotFound"},
		{name: "GET of a missing entity", method: "GET", path: "/items(PartitionKey='p',RowKey='none')", status: 404, code: "ResourceNotFound"},

		// Queries.
		{name: "filter syntax error", method: "GET", path: "/items()?$filter=PartitionKey%20eq", status: 400, code: "InvalidInput"},
		{name: "filter with a function", method: "GET", path: "/items()?$filter=startswith(PartitionKey,'p')", status: 400, code: "InvalidInput"},
		{name: "non-boolean filter", method: "GET", path: "/items()?$filter=1", status: 400, code: "InvalidInput"},
		{name: "filter with 16 comparisons", method: "GET", path: "/items()?$filter=" + strings.Repeat("N%20eq%201%20or%20", 15) + "N%20eq%201", status: 400, code: "InvalidInput"},
		{name: "$top over 1000", method: "GET", path: "/items()?$top=1001", status: 400, code: "InvalidInput"},
		{name: "negative $top", method: "GET", path: "/items()?$top=-1", status: 400, code: "InvalidInput"},
		{name: "forged NextPartitionKey", method: "GET", path: "/items()?NextPartitionKey=forged&NextRowKey=forged", status: 400, code: "InvalidInput"},
		{name: "NextRowKey alone", method: "GET", path: "/items()?NextRowKey=1%2112%21cg--", status: 400, code: "InvalidInput"},
		{name: "bad $select", method: "GET", path: "/items()?$select=a,,b", status: 400, code: "InvalidInput"},
		{name: "query a missing table", method: "GET", path: "/missing()", status: 404, code: "TableNotFound"},

		// Batches.
		{name: "batch without boundary", method: "POST", path: "/$batch", body: "junk", header: []string{"Content-Type", "multipart/mixed"}, status: 400, code: "InvalidInput"},
		{name: "batch not multipart", method: "POST", path: "/$batch", body: "{}", header: []string{"Content-Type", json}, status: 400, code: "InvalidInput"},
		{name: "batch with garbage parts", method: "POST", path: "/$batch", body: "--batch_x\r\ngarbage\r\n--batch_x--", header: []string{"Content-Type", batchCT}, status: 400, code: "InvalidInput"},
		// An operation's failure is answered inside a 202, naming the operation.
		{name: "batch over 100 operations", method: "POST", path: "/$batch", body: batchBody(ops...), header: []string{"Content-Type", batchCT}, status: 202, code: "InvalidInput"},
		{name: "batch naming an entity twice", method: "POST", path: "/$batch", body: batchBody(batchInsert("b", "1"), batchInsert("b", "1")), header: []string{"Content-Type", batchCT}, status: 202, code: "InvalidDuplicateRow"},
		{name: "batch across partitions", method: "POST", path: "/$batch", body: batchBody(batchInsert("b", "1"), batchInsert("c", "1")), header: []string{"Content-Type", batchCT}, status: 202, code: "CommandsInBatchActOnDifferentPartitions"},
		{name: "batch inserting an existing entity", method: "POST", path: "/$batch", body: batchBody(batchInsert("p", "x"), batchInsert("p", "r")), header: []string{"Content-Type", batchCT}, status: 202, code: "EntityAlreadyExists"},
		{name: "batch over 4 MiB", method: "POST", path: "/$batch", body: batchBody(batchInsert("b", strings.Repeat("x", 4<<20))), header: []string{"Content-Type", batchCT}, status: 413, code: "RequestBodyTooLarge"},

		// XML operations.
		{name: "ACL not XML", method: "PUT", path: "/items?comp=acl", body: "<SignedIdentifiers>", header: []string{"Content-Type", "application/xml"}, status: 400, code: "InvalidXmlDocument"},
		{name: "ACL with 6 identifiers", method: "PUT", path: "/items?comp=acl", body: "<SignedIdentifiers>" + strings.Repeat("<SignedIdentifier><Id>x</Id><AccessPolicy><Permission>r</Permission></AccessPolicy></SignedIdentifier>", 6) + "</SignedIdentifiers>", header: []string{"Content-Type", "application/xml"}, status: 400, code: "InvalidXmlDocument"},
		{name: "ACL of a missing table", method: "GET", path: "/missing?comp=acl", status: 404, code: "TableNotFound"},
		{name: "properties not XML", method: "PUT", path: "/?restype=service&comp=properties", body: "{}", header: []string{"Content-Type", "application/xml"}, status: 400, code: "InvalidXmlDocument"},
		{name: "preflight with CORS off", method: "OPTIONS", path: "/items", header: []string{"Origin", "https://a.example", "Access-Control-Request-Method", "GET"}, unsigned: true, status: 403, code: "CorsPreflightFailure"},
		{name: "preflight without Origin", method: "OPTIONS", path: "/items", header: []string{"Access-Control-Request-Method", "GET"}, unsigned: true, status: 400, code: "InvalidHeaderValue"},
	}
}

// TestBadRequests sends each malformed or hostile request and checks the
// service's status and error code (header and body), then that the server
// still serves and no stored data changed.
func TestBadRequests(t *testing.T) {
	ts := startServer(t, nil)
	client := &http.Client{}
	ctx := context.Background()
	do := func(method, path, body string, header ...string) (*http.Response, []byte) {
		var b []byte
		if body != "" || method == "POST" || method == "PUT" || method == "MERGE" {
			b = []byte(body)
		}
		return send(t, client, rawRequest(t, ts, method, path, b, true, header...))
	}
	if resp, body := do("POST", "/Tables", `{"TableName":"items"}`); resp.StatusCode != 201 {
		t.Fatalf("create table: %d %s", resp.StatusCode, body)
	}
	resp, body := do("POST", "/items", `{"PartitionKey":"p","RowKey":"r","N":1}`)
	if resp.StatusCode != 201 {
		t.Fatalf("insert: %d %s", resp.StatusCode, body)
	}
	etag := resp.Header.Get("ETag")

	cases := badRequests()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b []byte
			if c.body != "" || c.method == "POST" || c.method == "PUT" {
				b = []byte(c.body)
			}
			req := rawRequest(t, ts, c.method, c.path, b, false, c.header...)
			if !c.unsigned {
				signLite(t, req, auth.DevAccountKey)
			}
			resp, body := send(t, client, req)
			if resp.StatusCode != c.status || resp.Header.Get("x-ms-error-code") != c.code {
				t.Fatalf("got %d %s, want %d %s: %.200q", resp.StatusCode, resp.Header.Get("x-ms-error-code"), c.status, c.code, body)
			}
			if resp.Header.Get("x-ms-request-id") == "" {
				t.Error("no x-ms-request-id")
			}
			if c.method != "OPTIONS" && bodyCode(t, resp, body) != c.code {
				t.Errorf("body code %q, want %q: %.200q", bodyCode(t, resp, body), c.code, body)
			}
		})
	}
	t.Logf("%d malformed or hostile requests", len(cases))

	// Nothing changed: the one entity, with its ETag, in the one table.
	resp, body = do("GET", "/items()", "")
	var feed struct{ Value []map[string]any }
	if err := json.Unmarshal(body, &feed); err != nil || resp.StatusCode != 200 || len(feed.Value) != 1 || feed.Value[0]["odata.etag"] != etag {
		t.Fatalf("after the bad requests: %d, %d entities (want 1 with ETag %s): %.300q", resp.StatusCode, len(feed.Value), etag, body)
	}
	page, err := ts.Store.QueryTables(ctx, auth.DevAccountName, partition.TableQuery{})
	if err != nil || len(page.Tables) != 1 {
		t.Fatalf("tables after the bad requests: %v %v", page.Tables, err)
	}
}

// bodyCode reads the error code from a JSON (odata.error) or XML error body.
func bodyCode(t *testing.T, resp *http.Response, body []byte) string {
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "multipart/mixed") {
		// A batch: the failed operation's JSON error is its last line.
		lines := strings.Split(strings.TrimSpace(string(body)), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.HasPrefix(lines[i], "{") {
				body = []byte(lines[i])
				break
			}
		}
	} else if strings.Contains(resp.Header.Get("Content-Type"), "xml") {
		var doc struct {
			Code string `xml:"code"`
		}
		if err := xml.Unmarshal(body, &doc); err != nil || doc.Code == "" {
			var plain struct{ Code string }
			xml.Unmarshal(body, &plain)
			return plain.Code
		}
		return doc.Code
	}
	var doc struct {
		Error struct{ Code string } `json:"odata.error"`
	}
	json.Unmarshal(body, &doc)
	return doc.Error.Code
}
