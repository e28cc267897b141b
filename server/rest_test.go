package server_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabuladb/tabula/server"
)

// TestResponseHeadersAndFormats checks the headers the service answers
// with and the body at each JSON metadata level.
func TestResponseHeadersAndFormats(t *testing.T) {
	ts := startServer(t, nil)
	c := &http.Client{}
	do := func(method, path, body string, header ...string) (*http.Response, []byte) {
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		return send(t, c, rawRequest(t, ts, method, path, b, true, header...))
	}

	resp, body := do("POST", "/Tables", `{"TableName":"fmt"}`, "Prefer", "return-no-content", "x-ms-client-request-id", "client-42")
	if resp.StatusCode != 204 || resp.Header.Get("Preference-Applied") != "return-no-content" || len(body) != 0 {
		t.Fatalf("create table, no content: %d %q %s", resp.StatusCode, resp.Header.Get("Preference-Applied"), body)
	}
	for _, h := range []string{"x-ms-request-id", "x-ms-version", "Date"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("no %s header", h)
		}
	}
	if got := resp.Header.Get("x-ms-client-request-id"); got != "client-42" {
		t.Errorf("x-ms-client-request-id echoed as %q", got)
	}
	if loc := resp.Header.Get("Location"); loc != ts.ServiceURL+"/Tables('fmt')" {
		t.Errorf("table Location %q", loc)
	}

	resp, body = do("POST", "/fmt", `{"PartitionKey":"p","RowKey":"it's","Big@odata.type":"Edm.Int64","Big":"12","D":1.5}`)
	if resp.StatusCode != 201 || resp.Header.Get("ETag") == "" {
		t.Fatalf("insert: %d %s", resp.StatusCode, body)
	}
	if loc := resp.Header.Get("Location"); loc != ts.ServiceURL+"/fmt(PartitionKey='p',RowKey='it''s')" {
		t.Errorf("entity Location %q", loc)
	}
	etag := resp.Header.Get("ETag")

	for _, c := range []struct {
		accept, format string
		level          string
		want, absent   []string
	}{
		{accept: "application/json;odata=nometadata", level: "nometadata",
			want: []string{`"Big":"12"`}, absent: []string{"odata.metadata", "odata.etag", "Big@odata.type"}},
		{accept: "application/json;odata=minimalmetadata", level: "minimalmetadata",
			want: []string{`"odata.metadata":"` + ts.ServiceURL + `/$metadata#fmt/@Element"`, `"odata.etag"`, `"Big@odata.type":"Edm.Int64"`}, absent: []string{"odata.type\":\"devstoreaccount1", "Timestamp@odata.type"}},
		{accept: "application/json;odata=fullmetadata", level: "fullmetadata",
			want: []string{`"odata.type":"devstoreaccount1.fmt"`, `"odata.id"`, `"odata.editLink"`, `"Timestamp@odata.type":"Edm.DateTime"`}},
		{accept: "application/json;odata=nometadata", format: "application/json;odata=fullmetadata", level: "fullmetadata",
			want: []string{`"odata.editLink"`}},
		{accept: "application/json", level: "minimalmetadata", want: []string{`"odata.etag"`}},
	} {
		path := "/fmt(PartitionKey='p',RowKey='it''s')"
		if c.format != "" {
			path += "?$format=" + strings.ReplaceAll(c.format, ";", "%3B")
		}
		resp, body := do("GET", path, "", "Accept", c.accept)
		if resp.StatusCode != 200 || resp.Header.Get("ETag") != etag {
			t.Fatalf("get (%s): %d ETag %q: %s", c.accept, resp.StatusCode, resp.Header.Get("ETag"), body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json;odata="+c.level+";streaming=true;charset=utf-8" {
			t.Errorf("Accept %s $format %q: Content-Type %q", c.accept, c.format, ct)
		}
		for _, w := range c.want {
			if !strings.Contains(string(body), w) {
				t.Errorf("%s: body lacks %s: %s", c.level, w, body)
			}
		}
		for _, a := range c.absent {
			if strings.Contains(string(body), a) {
				t.Errorf("%s: body has %s: %s", c.level, a, body)
			}
		}
	}

	// Continuation headers resume a query exactly.
	for _, rk := range []string{"a", "b", "c"} {
		do("POST", "/fmt", `{"PartitionKey":"q","RowKey":"`+rk+`"}`, "Prefer", "return-no-content")
	}
	resp, body = do("GET", "/fmt()?$filter=PartitionKey%20eq%20'q'&$top=2", "")
	next := resp.Header.Get("x-ms-continuation-NextPartitionKey")
	if next == "" || !strings.Contains(string(body), `"RowKey":"b"`) || strings.Contains(string(body), `"RowKey":"c"`) {
		t.Fatalf("first page: %q %s", next, body)
	}
	resp, body = do("GET", "/fmt()?$filter=PartitionKey%20eq%20'q'&$top=2&NextPartitionKey="+next+"&NextRowKey="+resp.Header.Get("x-ms-continuation-NextRowKey"), "")
	var feed struct{ Value []map[string]any }
	json.Unmarshal(body, &feed)
	if len(feed.Value) != 1 || feed.Value[0]["RowKey"] != "c" || resp.Header.Get("x-ms-continuation-NextPartitionKey") != "" {
		t.Fatalf("second page: %s", body)
	}
	resp, body = do("GET", "/fmt()?$top=0", "")
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"value":[]`) {
		t.Fatalf("$top=0: %d %s", resp.StatusCode, body)
	}

	// SharedKeyLite and X-HTTP-Method tunnelling (MERGE over POST).
	resp, body = do("POST", "/fmt(PartitionKey='p',RowKey='it''s')", `{"Added":true}`, "X-HTTP-Method", "MERGE", "If-Match", "*")
	if resp.StatusCode != 204 {
		t.Fatalf("tunnelled MERGE: %d %s", resp.StatusCode, body)
	}
	if _, body := do("GET", "/fmt(PartitionKey='p',RowKey='it''s')", ""); !strings.Contains(string(body), `"Added":true`) || !strings.Contains(string(body), `"D":1.5`) {
		t.Fatalf("after tunnelled MERGE: %s", body)
	}
}

func TestCORS(t *testing.T) {
	ts := startServer(t, nil)
	c := &http.Client{}
	props := `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Cors><CorsRule>` +
		`<AllowedOrigins>https://app.example</AllowedOrigins><AllowedMethods>GET,PUT</AllowedMethods>` +
		`<MaxAgeInSeconds>300</MaxAgeInSeconds><ExposedHeaders>x-ms-request-id</ExposedHeaders><AllowedHeaders>x-ms-*</AllowedHeaders>` +
		`</CorsRule></Cors></StorageServiceProperties>`
	resp, body := send(t, c, rawRequest(t, ts, "PUT", "/?restype=service&comp=properties", []byte(props), true, "Content-Type", "application/xml"))
	if resp.StatusCode != 202 {
		t.Fatalf("set properties: %d %s", resp.StatusCode, body)
	}
	preflight := func(origin, method, headers string) *http.Response {
		req := rawRequest(t, ts, "OPTIONS", "/Tables", nil, false, "Origin", origin, "Access-Control-Request-Method", method, "Access-Control-Request-Headers", headers)
		resp, _ := send(t, c, req)
		return resp
	}
	resp = preflight("https://app.example", "PUT", "x-ms-date,x-ms-version")
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		resp.Header.Get("Access-Control-Max-Age") != "300" || !strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "PUT") {
		t.Fatalf("allowed preflight: %d %v", resp.StatusCode, resp.Header)
	}
	for _, bad := range [][3]string{{"https://evil.example", "GET", ""}, {"https://app.example", "DELETE", ""}, {"https://app.example", "GET", "authorization"}} {
		if resp := preflight(bad[0], bad[1], bad[2]); resp.StatusCode != 403 || resp.Header.Get("x-ms-error-code") != "CorsPreflightFailure" {
			t.Errorf("preflight %v: %d %s", bad, resp.StatusCode, resp.Header.Get("x-ms-error-code"))
		}
	}
	resp, _ = send(t, c, rawRequest(t, ts, "GET", "/Tables", nil, true, "Origin", "https://app.example"))
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "x-ms-request-id") {
		t.Fatalf("actual CORS request: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestHostileConnections sends what no client should: junk paths, huge
// headers, and a client that stops mid-header. Each is refused or cut off,
// and the server keeps serving.
func TestHostileConnections(t *testing.T) {
	ts := startServer(t, &server.Options{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, MaxHeaderBytes: 16 << 10})
	c := &http.Client{}
	for _, path := range []string{"/", "//", "/%zz", "/devstoreaccount1", "/devstoreaccount1/" + strings.Repeat("a", 8000),
		"/devstoreaccount1/t(PartitionKey='a',RowKey='b')(x)", "/devstoreaccount1/Tables('a'", "/devstoreaccount1/$batch/x"} {
		req, err := http.NewRequest("GET", ts.Endpoint+"/placeholder", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = path
		resp, body := send(t, c, req)
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Errorf("GET %.60s: %d %.200s", path, resp.StatusCode, body)
		}
	}

	req := rawRequest(t, ts, "GET", "/Tables", nil, true, "X-Junk", strings.Repeat("j", 32<<10))
	if resp, _ := send(t, c, req); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("32 KiB header: %d", resp.StatusCode)
	}

	// A client that sends half a request line and stalls is cut off.
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.Endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /devstoreaccount1/Tables HTTP/1.1\r\nHost: x\r\n")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := bufio.NewReader(conn).ReadByte(); err == nil {
		// net/http may answer 408 before closing; either way the
		// connection ends.
		io.Copy(io.Discard, conn)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a stalled client held its connection for %v", d)
	}

	resp, body := send(t, c, rawRequest(t, ts, "GET", "/Tables", nil, true))
	if resp.StatusCode != 200 {
		t.Fatalf("after hostile connections: %d %s", resp.StatusCode, body)
	}
}
