package batch

import (
	"bytes"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"sort"
	"strings"
	"testing"
)

// goSDKBody builds a batch the way aztables does: mime/multipart writers,
// part headers via textproto (sorted on output), the request line
// "METHOD URL HTTP/1.1\r\n", the sub-request's headers sorted by name, an
// empty line, the JSON body.
func goSDKBody(t *testing.T, batchID, changesetID string, subs []goSub) []byte {
	t.Helper()
	var cs bytes.Buffer
	w := multipart.NewWriter(&cs)
	if err := w.SetBoundary("changeset_" + changesetID); err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		h := make(textproto.MIMEHeader)
		h.Set("Content-Transfer-Encoding", "binary")
		h.Set("Content-Type", "application/http")
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(pw, "%s %s HTTP/1.1\r\n", s.method, s.url)
		keys := make([]string, 0, len(s.header))
		for k := range s.header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(pw, "%s: %s\r\n", k, s.header[k])
		}
		pw.Write([]byte("\r\n"))
		pw.Write([]byte(s.body))
	}
	w.Close()

	var body bytes.Buffer
	outer := multipart.NewWriter(&body)
	if err := outer.SetBoundary("batch_" + batchID); err != nil {
		t.Fatal(err)
	}
	h := make(textproto.MIMEHeader)
	h.Set("Content-Type", "multipart/mixed; boundary=changeset_"+changesetID)
	pw, _ := outer.CreatePart(h)
	pw.Write(cs.Bytes())
	outer.Close()
	return body.Bytes()
}

type goSub struct {
	method, url string
	header      map[string]string
	body        string
}

const (
	batchID     = "a1e9d677-b28b-435e-a89e-87e6a768a431"
	changesetID = "8a28b620-b4bb-458c-a177-0959fb14c977"
	ctBatch     = "multipart/mixed; boundary=batch_" + batchID
	base        = "http://127.0.0.1:10002/devstoreaccount1/"
)

func TestParseGoSDK(t *testing.T) {
	body := goSDKBody(t, batchID, changesetID, []goSub{
		{"POST", base + "mytable?%24format=application%2Fjson%3Bodata%3Dminimalmetadata",
			map[string]string{"Accept": "application/json;odata=minimalmetadata", "Content-Type": "application/json",
				"DataServiceVersion": "3.0", "Prefer": "return-no-content"},
			`{"PartitionKey":"pk","RowKey":"r1","Pct":"100% sure"}`},
		{"PATCH", base + "mytable(PartitionKey='pk',RowKey='r2')",
			map[string]string{"Content-Type": "application/json", "DataServiceVersion": "3.0", "If-Match": `W/"datetime'2024-01-01T00%3A00%3A00.0000000Z'"`},
			`{"PartitionKey":"pk","RowKey":"r2","V":2}`},
		{"PUT", base + "mytable(PartitionKey='pk',RowKey='r3')", map[string]string{"Content-Type": "application/json"}, `{"PartitionKey":"pk","RowKey":"r3"}`},
		{"DELETE", base + "mytable(PartitionKey='pk',RowKey='r%27%27s%20four')?%24format=application%2Fjson%3Bodata%3Dminimalmetadata",
			map[string]string{"Accept": "application/json;odata=minimalmetadata", "If-Match": "*"}, ""},
	})
	req, err := Parse(ctBatch, bytes.NewReader(body), Limits{})
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if req.IsQuery() || req.Boundary != "batch_"+batchID || req.ChangesetBoundary != "changeset_"+changesetID || len(req.Operations) != 4 {
		t.Fatalf("request %+v", req)
	}
	ops := req.Operations
	checkOp(t, ops[0], 0, "POST", `{"PartitionKey":"pk","RowKey":"r1","Pct":"100% sure"}`)
	if ops[0].Header.Get("Prefer") != "return-no-content" || ops[0].Header.Get("Dataserviceversion") != "3.0" {
		t.Fatalf("headers %v", ops[0].Header)
	}
	if ops[0].URL.Query().Get("$format") != "application/json;odata=minimalmetadata" {
		t.Fatalf("query %v", ops[0].URL.Query())
	}
	checkOp(t, ops[1], 1, "PATCH", `{"PartitionKey":"pk","RowKey":"r2","V":2}`)
	if ops[1].Header.Get("If-Match") != `W/"datetime'2024-01-01T00%3A00%3A00.0000000Z'"` {
		t.Fatalf("If-Match %q", ops[1].Header.Get("If-Match"))
	}
	checkOp(t, ops[3], 3, "DELETE", "")
	tg, err := ops[3].Target("devstoreaccount1")
	if err != nil || tg != (Target{Kind: TargetEntity, Table: "mytable", PartitionKey: "pk", RowKey: "r's four"}) {
		t.Fatalf("target %+v, %v", tg, err)
	}
	tg, err = ops[0].Target("devstoreaccount1")
	if err != nil || tg.Kind != TargetEntitySet || tg.Table != "mytable" {
		t.Fatalf("insert target %+v, %v", tg, err)
	}
}

func checkOp(t *testing.T, op *Operation, index int, method, body string) {
	t.Helper()
	if op.Index != index || op.Method != method || string(op.Body) != body || op.Proto != "HTTP/1.1" {
		t.Fatalf("op %d: got index %d %s body %q, want %d %s %q", index, op.Index, op.Method, op.Body, index, method, body)
	}
	if body == "" && op.Body != nil {
		t.Fatalf("op %d: empty body should be nil", index)
	}
}

// jsSDKBody builds a batch the way @azure/data-tables does: string pieces
// joined with CRLF, so the empty line after the sub-request headers is
// followed by one more CRLF before the body, and a CRLF precedes the first
// change set delimiter.
func jsSDKBody(subs []goSub) string {
	const nl = "\r\n"
	parts := []string{"--batch_" + batchID + nl + "Content-Type: multipart/mixed; boundary=changeset_" + changesetID + nl + nl}
	for _, s := range subs {
		lines := []string{"--changeset_" + changesetID + nl + "Content-Type: application/http" + nl + "Content-Transfer-Encoding: binary",
			"", s.method + " " + s.url + " HTTP/1.1"}
		for k, v := range s.header {
			lines = append(lines, k+": "+v)
		}
		lines = append(lines, nl)
		if s.body != "" {
			lines = append(lines, s.body)
		}
		parts = append(parts, strings.Join(lines, nl))
	}
	return strings.Join(parts, nl) + nl + "--changeset_" + changesetID + "--" + nl + "--batch_" + batchID + "--" + nl
}

func TestParseJSSDK(t *testing.T) {
	subs := []goSub{
		{"POST", base + "mytable", map[string]string{"content-type": "application/json", "accept": "application/json", "prefer": "return-no-content"}, `{"PartitionKey":"p","RowKey":"1"}`},
		{"DELETE", base + "mytable(PartitionKey='p',RowKey='2')", map[string]string{"if-match": "*"}, ""},
		{"MERGE", base + "mytable(PartitionKey='p',RowKey='3')", map[string]string{"content-type": "application/json"}, `{"PartitionKey":"p","RowKey":"3"}`},
	}
	for _, variant := range []struct {
		name string
		body string
	}{
		{"crlf", jsSDKBody(subs)},
		{"lf-only", strings.ReplaceAll(jsSDKBody(subs), "\r\n", "\n")},
	} {
		t.Run(variant.name, func(t *testing.T) {
			req, err := Parse(`multipart/mixed; boundary="batch_`+batchID+`"`, strings.NewReader(variant.body), Limits{})
			if err != nil {
				t.Fatalf("%v\n%s", err, variant.body)
			}
			if len(req.Operations) != 3 {
				t.Fatalf("%d operations", len(req.Operations))
			}
			checkOp(t, req.Operations[0], 0, "POST", `{"PartitionKey":"p","RowKey":"1"}`)
			checkOp(t, req.Operations[1], 1, "DELETE", "")
			checkOp(t, req.Operations[2], 2, "MERGE", `{"PartitionKey":"p","RowKey":"3"}`)
			if req.Operations[1].Header.Get("If-Match") != "*" || req.Operations[0].Header.Get("Prefer") != "return-no-content" {
				t.Fatalf("headers not canonicalized: %v", req.Operations[1].Header)
			}
		})
	}
}

// TestParseDocSamples parses the request samples of
// performing-entity-group-transactions: spaces inside a URL, Content-ID
// among the sub-request headers, "DataServiceVersion: 3.0;", no close
// delimiter at the end of the batch.
func TestParseDocSamples(t *testing.T) {
	body := "--batch_a1e9d677-b28b-435e-a89e-87e6a768a431\r\n" +
		"Content-Type: multipart/mixed; boundary=changeset_8a28b620-b4bb-458c-a177-0959fb14c977\r\n\r\n" +
		"--changeset_8a28b620-b4bb-458c-a177-0959fb14c977\r\n" +
		"Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
		"POST https://myaccount.table.core.windows.net/Blogs HTTP/1.1\r\n" +
		"Content-ID: 1\r\nContent-Type: application/json\r\nAccept: application/json;odata=minimalmetadata\r\nPrefer: return-no-content\r\nDataServiceVersion: 3.0;\r\n\r\n" +
		"{\"PartitionKey\":\"Channel_19\", \"RowKey\":\"1\", \"Rating\":9, \"Text\":\".NET...\"}\r\n" +
		"--changeset_8a28b620-b4bb-458c-a177-0959fb14c977\r\n" +
		"Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
		"MERGE https://myaccount.table.core.windows.net/Blogs(PartitionKey='Channel_17', RowKey='3') HTTP/1.1\r\n" +
		"Content-Type: application/json\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0;\r\n\r\n" +
		"{\"PartitionKey\":\"Channel_19\", \"RowKey\":\"3\", \"Rating\":9, \"Text\":\"PDC 2008...\"}\r\n\r\n" +
		"--changeset_8a28b620-b4bb-458c-a177-0959fb14c977--\r\n" +
		"--batch_a1e9d677-b28b-435e-a89e-87e6a768a431\r\n\r\n"
	req, err := Parse(ctBatch, strings.NewReader(body), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Operations) != 2 || req.Operations[0].ContentID != "1" || req.Operations[1].ContentID != "" {
		t.Fatalf("ops %+v", req.Operations)
	}
	tg, err := req.Operations[1].Target("")
	if err != nil || tg != (Target{Kind: TargetEntity, Table: "Blogs", PartitionKey: "Channel_17", RowKey: "3"}) {
		t.Fatalf("target %+v %v", tg, err)
	}

	query := "--batch_f351702c-c8c8-48c6-af2c-91b809c651ce\r\n" +
		"Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
		"GET https://myaccount.table.core.windows.net/Blogs(PartitionKey='Channel_19',RowKey='2') HTTP/1.1\r\n" +
		"Accept: application/json;odata=minimalmetadata\r\n\r\n" +
		"--batch_f351702c-c8c8-48c6-af2c-91b809c651ce--\r\n"
	req, err = Parse("multipart/mixed; boundary=batch_f351702c-c8c8-48c6-af2c-91b809c651ce", strings.NewReader(query), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !req.IsQuery() || len(req.Operations) != 1 || req.Operations[0].Method != "GET" || req.Operations[0].Body != nil {
		t.Fatalf("query %+v", req)
	}
}

func TestParseRelativeURLsAndContentID(t *testing.T) {
	body := "--batch_b\nContent-Type: multipart/mixed; boundary=changeset_c\n\n" +
		"--changeset_c\nContent-Type: application/http\nContent-Transfer-Encoding: binary\nContent-ID: 7\n\n" +
		"PUT /devstoreaccount1/t1(PartitionKey='a',RowKey='b') HTTP/1.1\nIf-Match: *\n\n{}\n" +
		"--changeset_c\nContent-Type: application/http\n\n" +
		"DELETE t1(PartitionKey='a:b',RowKey='%2F') HTTP/1.1\n\n" +
		"--changeset_c--\n--batch_b--\n"
	req, err := Parse("multipart/mixed; boundary=batch_b", strings.NewReader(body), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	op := req.Operations[0]
	if op.ContentID != "7" || string(op.Body) != "{}" {
		t.Fatalf("op0 %+v", op)
	}
	tg, err := op.Target("devstoreaccount1")
	if err != nil || tg.PartitionKey != "a" || tg.RowKey != "b" {
		t.Fatalf("op0 target %+v %v", tg, err)
	}
	tg, err = req.Operations[1].Target("devstoreaccount1")
	if err != nil || tg != (Target{Kind: TargetEntity, Table: "t1", PartitionKey: "a:b", RowKey: "/"}) {
		t.Fatalf("op1 target %+v %v", tg, err)
	}
}

// changeset wraps n operation parts in a batch.
func changeset(n int, op string) string {
	var b strings.Builder
	b.WriteString("--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n")
	for i := 0; i < n; i++ {
		b.WriteString("--changeset_c\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" + op + "\r\n")
	}
	b.WriteString("--changeset_c--\r\n--batch_b--\r\n")
	return b.String()
}

const insertOp = "POST http://h/devstoreaccount1/t1 HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{\"PartitionKey\":\"p\",\"RowKey\":\"r\"}"

func TestParseLimits(t *testing.T) {
	if req, err := Parse("multipart/mixed; boundary=batch_b", strings.NewReader(changeset(100, insertOp)), Limits{}); err != nil || len(req.Operations) != 100 {
		t.Fatalf("100 operations: %v", err)
	}
	_, err := Parse("multipart/mixed; boundary=batch_b", strings.NewReader(changeset(101, insertOp)), Limits{})
	var e *Error
	if ErrorCode(err) != CodeInvalidInput || !asError(err, &e) || e.Index != 0 || e.Message != MsgTooManyOperations {
		t.Fatalf("101 operations: %+v", err)
	}
	body := changeset(3, insertOp)
	if _, err := Parse("multipart/mixed; boundary=batch_b", strings.NewReader(body), Limits{MaxBodyBytes: int64(len(body))}); err != nil {
		t.Fatalf("body at the limit: %v", err)
	}
	_, err = Parse("multipart/mixed; boundary=batch_b", strings.NewReader(body), Limits{MaxBodyBytes: int64(len(body) - 1)})
	if !asError(err, &e) || e.Status != 413 || e.Code != CodeRequestBodyTooLarge {
		t.Fatalf("body over the limit: %v", err)
	}
	big := changeset(1, "POST http://h/a/t HTTP/1.1\r\n\r\n{\"x\":\""+strings.Repeat("x", MaxBodyBytes)+"\"}")
	if _, err := Parse("multipart/mixed; boundary=batch_b", strings.NewReader(big), Limits{}); ErrorCode(err) != CodeRequestBodyTooLarge {
		t.Fatalf("4 MiB default: %v", err)
	}
}

func asError(err error, e **Error) bool {
	x, ok := err.(*Error)
	*e = x
	return ok
}

func TestParseMalformed(t *testing.T) {
	get := "GET http://h/devstoreaccount1/t1(PartitionKey='a',RowKey='b') HTTP/1.1\r\nAccept: application/json\r\n\r\n"
	for _, c := range []struct {
		name, ct, body string
		index          int
	}{
		{"not multipart", "application/json", changeset(1, insertOp), -1},
		{"multipart/form-data", "multipart/form-data; boundary=batch_b", changeset(1, insertOp), -1},
		{"no boundary", "multipart/mixed", changeset(1, insertOp), -1},
		{"bad media type", "multipart/mixed; boundary", changeset(1, insertOp), -1},
		{"boundary never occurs", "multipart/mixed; boundary=batch_x", changeset(1, insertOp), -1},
		{"empty body", "multipart/mixed; boundary=batch_b", "", -1},
		{"only close", "multipart/mixed; boundary=batch_b", "--batch_b--\r\n", -1},
		{"unterminated", "multipart/mixed; boundary=batch_b", strings.TrimSuffix(changeset(1, insertOp), "--changeset_c--\r\n--batch_b--\r\n"), -1},
		{"empty change set", "multipart/mixed; boundary=batch_b", "--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n--changeset_c--\r\n--batch_b--\r\n", -1},
		{"changeset without boundary", "multipart/mixed; boundary=batch_b", "--batch_b\r\nContent-Type: multipart/mixed\r\n\r\n--changeset_c--\r\n--batch_b--\r\n", -1},
		{"part without content type", "multipart/mixed; boundary=batch_b", "--batch_b\r\nX-Other: 1\r\n\r\nhello\r\n--batch_b--\r\n", -1},
		{"part of another type", "multipart/mixed; boundary=batch_b", "--batch_b\r\nContent-Type: text/plain\r\n\r\nhello\r\n--batch_b--\r\n", -1},
		{"part headers never end", "multipart/mixed; boundary=batch_b", "--batch_b\r\nContent-Type: application/http\r\n--batch_b--\r\n", -1},
		{"two change sets", "multipart/mixed; boundary=batch_b", strings.Replace(changeset(1, insertOp), "--batch_b--", "--batch_b\r\nContent-Type: multipart/mixed; boundary=changeset_c\r\n\r\n--changeset_c--\r\n--batch_b--", 1), -1},
		{"lone non-GET", "multipart/mixed; boundary=batch_b", "--batch_b\r\nContent-Type: application/http\r\n\r\n" + insertOp + "\r\n--batch_b--\r\n", 0},
		{"GET in change set", "multipart/mixed; boundary=batch_b", changeset(2, get), 0},
		{"unknown method", "multipart/mixed; boundary=batch_b", changeset(1, "BREW http://h/a/t HTTP/1.1\r\n\r\n"), 0},
		{"lower-case method", "multipart/mixed; boundary=batch_b", changeset(1, "post http://h/a/t HTTP/1.1\r\n\r\n"), 0},
		{"no protocol", "multipart/mixed; boundary=batch_b", changeset(1, "POST http://h/a/t\r\n\r\n"), 0},
		{"bad protocol", "multipart/mixed; boundary=batch_b", changeset(1, "POST http://h/a/t HTTP/2\r\n\r\n"), 0},
		{"no URL", "multipart/mixed; boundary=batch_b", changeset(1, "POST  HTTP/1.1\r\n\r\n"), 0},
		{"empty operation", "multipart/mixed; boundary=batch_b", changeset(1, ""), 0},
		{"bad URL", "multipart/mixed; boundary=batch_b", changeset(1, "POST http://h/a/t%zz HTTP/1.1\r\n\r\n"), 0},
		{"bad header line", "multipart/mixed; boundary=batch_b", changeset(1, "POST http://h/a/t HTTP/1.1\r\nno colon here\r\n\r\n{}"), 0},
		{"header name with space", "multipart/mixed; boundary=batch_b", changeset(1, "POST http://h/a/t HTTP/1.1\r\nBad Name: x\r\n\r\n{}"), 0},
		{"leading continuation", "multipart/mixed; boundary=batch_b", changeset(1, "POST http://h/a/t HTTP/1.1\r\n folded\r\n\r\n{}"), 0},
		{"operation not application/http", "multipart/mixed; boundary=batch_b",
			strings.Replace(changeset(1, insertOp), "Content-Type: application/http", "Content-Type: text/plain", 1), 0},
		{"bad transfer encoding", "multipart/mixed; boundary=batch_b",
			strings.Replace(changeset(1, insertOp), "Content-Transfer-Encoding: binary", "Content-Transfer-Encoding: base64", 1), 0},
		{"nested change set", "multipart/mixed; boundary=batch_b",
			strings.Replace(changeset(1, insertOp), "Content-Type: application/http", "Content-Type: multipart/mixed; boundary=x", 1), 0},
		{"too many headers", "multipart/mixed; boundary=batch_b", changeset(1, "POST http://h/a/t HTTP/1.1\r\n"+strings.Repeat("X-A: 1\r\n", 101)+"\r\n{}"), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.ct, strings.NewReader(c.body), Limits{})
			var e *Error
			if !asError(err, &e) || e.Status != 400 || e.Code != CodeInvalidInput || e.Index != c.index || e.Message == "" {
				t.Fatalf("got %#v, want 400 InvalidInput at index %d", err, c.index)
			}
		})
	}
}

func TestParseTolerates(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"preamble and epilogue", "preamble text\r\n" + changeset(1, insertOp) + "epilogue"},
		{"transport padding", strings.ReplaceAll(changeset(1, insertOp), "--changeset_c\r\n", "--changeset_c  \r\n")},
		{"boundary prefix inside body", changeset(1, "POST http://h/a/t HTTP/1.1\r\n\r\n{\"x\":\"\n--changeset_cX\"}")},
		{"folded header", changeset(1, "POST http://h/a/t HTTP/1.1\r\nX-Long: a\r\n b\r\n\r\n{}")},
		{"no blank line after delete headers", changeset(1, "DELETE http://h/a/t(PartitionKey='a',RowKey='b') HTTP/1.1\r\nIf-Match: *")},
		{"blank line before request line", changeset(1, "\r\n"+insertOp)},
		{"close without final CRLF", strings.TrimSuffix(changeset(1, insertOp), "\r\n")},
		{"text after close delimiter", strings.TrimSuffix(changeset(1, insertOp), "\r\n") + "trailing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Parse("multipart/mixed; boundary=batch_b", strings.NewReader(c.body), Limits{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestEffectiveMethod(t *testing.T) {
	h := func(vs ...string) http.Header { return http.Header{"X-Http-Method": vs} }
	for _, c := range []struct {
		method string
		h      http.Header
		want   string
		code   string
	}{
		{"PUT", http.Header{}, "PUT", ""},
		{"POST", h("MERGE"), "MERGE", ""},
		{"POST", h("delete"), "DELETE", ""},
		{"PUT", h("MERGE"), "", CodeXMethodNotUsingPost},
		{"POST", h("MERGE", "PUT"), "", CodeXMethodIncorrectCount},
		{"POST", h("MERGE, PUT"), "", CodeXMethodIncorrectCount},
		{"POST", h("GET"), "", CodeXMethodIncorrectValue},
	} {
		got, err := EffectiveMethod(c.method, c.h)
		if got != c.want || ErrorCode(err) != c.code {
			t.Errorf("%s %v: got %q %v, want %q %s", c.method, c.h, got, err, c.want, c.code)
		}
	}
}
