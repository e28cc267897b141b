package batch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var testWriter = &ResponseWriter{
	BatchBoundary:     "batchresponse_4d6c18c7-3a5f-4e71-96be-5ab90f68bf16",
	ChangesetBoundary: "changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5",
}

const etag = `W/"datetime'2024-12-23T09%3A20%3A10.1623783Z'"`

func successParts() []SubResponse {
	return []SubResponse{
		{Status: 204, PreferenceApplied: "return-no-content", DataServiceVersion: "3.0;",
			Location:      "http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='1')",
			DataServiceID: "http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='1')", ETag: etag},
		{Status: 201, ContentID: "2", PreferenceApplied: "return-content", DataServiceVersion: "3.0;",
			ContentType: "application/json;odata=minimalmetadata;streaming=true;charset=utf-8",
			Location:    "http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='2')",
			ETag:        etag, Body: []byte(`{"PartitionKey":"p","RowKey":"2"}`)},
		{Status: 204, DataServiceVersion: "1.0;", ETag: etag},
		{Status: 204, DataServiceVersion: "1.0;"},
	}
}

// The golden response: the framing real Azure sends (Azurite PR #2521
// quotes it), three CRLFs after the last header of a bodiless part.
const goldenSuccess = "--batchresponse_4d6c18c7-3a5f-4e71-96be-5ab90f68bf16\r\n" +
	"Content-Type: multipart/mixed; boundary=changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5\r\n" +
	"\r\n" +
	"--changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5\r\n" +
	"Content-Type: application/http\r\n" +
	"Content-Transfer-Encoding: binary\r\n" +
	"\r\n" +
	"HTTP/1.1 204 No Content\r\n" +
	"X-Content-Type-Options: nosniff\r\n" +
	"Cache-Control: no-cache\r\n" +
	"Preference-Applied: return-no-content\r\n" +
	"DataServiceVersion: 3.0;\r\n" +
	"Location: http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='1')\r\n" +
	"DataServiceId: http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='1')\r\n" +
	"ETag: W/\"datetime'2024-12-23T09%3A20%3A10.1623783Z'\"\r\n" +
	"\r\n" +
	"\r\n" +
	"--changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5\r\n" +
	"Content-Type: application/http\r\n" +
	"Content-Transfer-Encoding: binary\r\n" +
	"\r\n" +
	"HTTP/1.1 201 Created\r\n" +
	"Content-ID: 2\r\n" +
	"X-Content-Type-Options: nosniff\r\n" +
	"Cache-Control: no-cache\r\n" +
	"Preference-Applied: return-content\r\n" +
	"DataServiceVersion: 3.0;\r\n" +
	"Content-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n" +
	"Location: http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='p',RowKey='2')\r\n" +
	"ETag: W/\"datetime'2024-12-23T09%3A20%3A10.1623783Z'\"\r\n" +
	"\r\n" +
	"{\"PartitionKey\":\"p\",\"RowKey\":\"2\"}\r\n" +
	"--changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5\r\n" +
	"Content-Type: application/http\r\n" +
	"Content-Transfer-Encoding: binary\r\n" +
	"\r\n" +
	"HTTP/1.1 204 No Content\r\n" +
	"X-Content-Type-Options: nosniff\r\n" +
	"Cache-Control: no-cache\r\n" +
	"DataServiceVersion: 1.0;\r\n" +
	"ETag: W/\"datetime'2024-12-23T09%3A20%3A10.1623783Z'\"\r\n" +
	"\r\n" +
	"\r\n" +
	"--changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5\r\n" +
	"Content-Type: application/http\r\n" +
	"Content-Transfer-Encoding: binary\r\n" +
	"\r\n" +
	"HTTP/1.1 204 No Content\r\n" +
	"X-Content-Type-Options: nosniff\r\n" +
	"Cache-Control: no-cache\r\n" +
	"DataServiceVersion: 1.0;\r\n" +
	"\r\n" +
	"\r\n" +
	"--changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5--\r\n" +
	"--batchresponse_4d6c18c7-3a5f-4e71-96be-5ab90f68bf16--\r\n"

var failTime = time.Date(2013, 10, 14, 19, 21, 58, 89004800, time.UTC)

const goldenFailure = "--batchresponse_4d6c18c7-3a5f-4e71-96be-5ab90f68bf16\r\n" +
	"Content-Type: multipart/mixed; boundary=changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5\r\n" +
	"\r\n" +
	"--changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5\r\n" +
	"Content-Type: application/http\r\n" +
	"Content-Transfer-Encoding: binary\r\n" +
	"\r\n" +
	"HTTP/1.1 409 Conflict\r\n" +
	"Content-ID: 3\r\n" +
	"X-Content-Type-Options: nosniff\r\n" +
	"DataServiceVersion: 3.0;\r\n" +
	"Content-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n" +
	"\r\n" +
	`{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"2:The specified entity already exists.\nRequestId:8abd3c55-a72e-47ba-ae0b-ba43abeb76ae\nTime:2013-10-14T19:21:58.0890048Z"}}}` + "\r\n" +
	"--changesetresponse_d9a53c97-d6eb-4038-929f-6ffc409948e5--\r\n" +
	"--batchresponse_4d6c18c7-3a5f-4e71-96be-5ab90f68bf16--\r\n"

const goldenQuery = "--batchresponse_4d6c18c7-3a5f-4e71-96be-5ab90f68bf16\r\n" +
	"Content-Type: application/http\r\n" +
	"Content-Transfer-Encoding: binary\r\n" +
	"\r\n" +
	"HTTP/1.1 200 OK\r\n" +
	"X-Content-Type-Options: nosniff\r\n" +
	"Cache-Control: no-cache\r\n" +
	"DataServiceVersion: 3.0;\r\n" +
	"Content-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n" +
	"ETag: W/\"datetime'2024-12-23T09%3A20%3A10.1623783Z'\"\r\n" +
	"\r\n" +
	`{"PartitionKey":"Channel_19","RowKey":"2"}` + "\r\n" +
	"--batchresponse_4d6c18c7-3a5f-4e71-96be-5ab90f68bf16--\r\n"

func failure() SubResponse {
	return FailureResponse(2, "", 409, "EntityAlreadyExists", "The specified entity already exists.", "8abd3c55-a72e-47ba-ae0b-ba43abeb76ae", failTime)
}

func TestWriterGolden(t *testing.T) {
	for _, c := range []struct {
		name  string
		write func(io.Writer) error
		want  string
	}{
		{"success", func(w io.Writer) error { return testWriter.WriteChangeset(w, successParts()) }, goldenSuccess},
		{"failure", func(w io.Writer) error { return testWriter.WriteChangeset(w, []SubResponse{failure()}) }, goldenFailure},
		{"query", func(w io.Writer) error {
			return testWriter.WriteQuery(w, SubResponse{Status: 200, DataServiceVersion: "3.0;", ETag: etag,
				ContentType: "application/json;odata=minimalmetadata;streaming=true;charset=utf-8",
				Body:        []byte(`{"PartitionKey":"Channel_19","RowKey":"2"}`)})
		}, goldenQuery},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := c.write(&b); err != nil {
				t.Fatal(err)
			}
			if b.String() != c.want {
				t.Fatalf("got:\n%q\nwant:\n%q", b.String(), c.want)
			}
		})
	}
	if testWriter.ContentType() != "multipart/mixed; boundary=batchresponse_4d6c18c7-3a5f-4e71-96be-5ab90f68bf16" {
		t.Fatal(testWriter.ContentType())
	}
}

// readLikeGoSDK parses a response the way aztables does: the boundary from
// the body's first line, mime/multipart for both levels, and
// http.ReadResponse on every part. It returns the sub-responses' statuses.
func readLikeGoSDK(t *testing.T, body []byte) []int {
	t.Helper()
	boundaryOf := func(b []byte) string {
		end := bytes.IndexByte(b, '\n')
		if end > 0 && b[end-1] == '\r' {
			end--
		}
		return string(b[2:end])
	}
	outer := multipart.NewReader(bytes.NewReader(body), boundaryOf(body))
	part, err := outer.NextPart()
	if err != nil {
		t.Fatal(err)
	}
	inner, err := io.ReadAll(part)
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(bytes.NewReader(inner), boundaryOf(inner))
	var statuses []int
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("http.ReadResponse: %v on %q", err, raw)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 201 && resp.Header.Get("ETag") != etag {
			t.Fatalf("ETag %q", resp.Header.Get("ETag"))
		}
		statuses = append(statuses, resp.StatusCode)
	}
	return statuses
}

func TestResponsesParseLikeGoSDK(t *testing.T) {
	var b bytes.Buffer
	testWriter.WriteChangeset(&b, successParts())
	if got := readLikeGoSDK(t, b.Bytes()); len(got) != 4 || got[0] != 204 || got[1] != 201 {
		t.Fatalf("statuses %v", got)
	}
	b.Reset()
	testWriter.WriteChangeset(&b, []SubResponse{failure()})
	if got := readLikeGoSDK(t, b.Bytes()); len(got) != 1 || got[0] != 409 {
		t.Fatalf("statuses %v", got)
	}
}

// TestResponsesParseLikeJSSDK applies @azure/data-tables' reading: split on
// "--changesetresponse_", drop first and last pieces, then single-line
// regular expressions for status, JSON body, ETag and RowKey.
func TestResponsesParseLikeJSSDK(t *testing.T) {
	var b bytes.Buffer
	testWriter.WriteChangeset(&b, successParts())
	pieces := strings.Split(b.String(), "--changesetresponse_")
	subs := pieces[1 : len(pieces)-1]
	if len(subs) != 4 {
		t.Fatalf("%d sub-responses", len(subs))
	}
	status := regexp.MustCompile(`HTTP/1.1 ([0-9]*)`)
	etagRe := regexp.MustCompile(`ETag: (.*)`)
	rowKey := regexp.MustCompile(`RowKey='(.*)'`)
	for i, want := range []int{204, 201, 204, 204} {
		m := status.FindStringSubmatch(subs[i])
		if n, _ := strconv.Atoi(m[1]); n != want {
			t.Fatalf("sub %d status %v", i, m)
		}
	}
	if m := etagRe.FindStringSubmatch(subs[0]); strings.TrimSuffix(m[1], "\r") != etag {
		t.Fatalf("etag %q", m)
	}
	if m := rowKey.FindStringSubmatch(subs[0]); m[1] != "1" {
		t.Fatalf("row key %q", m)
	}

	b.Reset()
	testWriter.WriteChangeset(&b, []SubResponse{failure()})
	pieces = strings.Split(b.String(), "--changesetresponse_")
	body := regexp.MustCompile(`\{(.*)\}`).FindString(pieces[1])
	var doc struct {
		Err struct {
			Code    string                 `json:"code"`
			Message struct{ Value string } `json:"message"`
		} `json:"odata.error"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	if doc.Err.Code != "EntityAlreadyExists" || !strings.HasPrefix(doc.Err.Message.Value, "2:The specified entity already exists.\nRequestId:") {
		t.Fatalf("error %+v", doc)
	}
}

func TestFailureResponse(t *testing.T) {
	f := FailureResponse(0, "op-7", 404, "ResourceNotFound", "The specified resource does not exist.", "rid", failTime)
	if f.ContentID != "op-7" || f.Status != 404 || f.ContentType != ErrorContentType {
		t.Fatalf("%+v", f)
	}
	if string(ErrorBody(-1, "InvalidInput", "a <b> & c", "rid", failTime)) !=
		`{"odata.error":{"code":"InvalidInput","message":{"lang":"en-US","value":"a <b> & c\nRequestId:rid\nTime:2013-10-14T19:21:58.0890048Z"}}}` {
		t.Fatalf("%s", ErrorBody(-1, "InvalidInput", "a <b> & c", "rid", failTime))
	}
}

func TestNewResponseWriter(t *testing.T) {
	guid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	w1, w2 := NewResponseWriter(), NewResponseWriter()
	if !strings.HasPrefix(w1.BatchBoundary, "batchresponse_") || !guid.MatchString(strings.TrimPrefix(w1.BatchBoundary, "batchresponse_")) ||
		!guid.MatchString(strings.TrimPrefix(w1.ChangesetBoundary, "changesetresponse_")) || w1.BatchBoundary == w2.BatchBoundary {
		t.Fatalf("%+v %+v", w1, w2)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

func TestWriterReportsWriteErrors(t *testing.T) {
	if err := testWriter.WriteChangeset(failingWriter{}, successParts()); err == nil {
		t.Fatal("no error")
	}
	if err := testWriter.WriteQuery(failingWriter{}, successParts()[0]); err == nil {
		t.Fatal("no error")
	}
}

// TestRoundTripThroughParse checks the writer's framing with this
// package's own reader: a response parses as a multipart body too.
func TestRoundTripThroughParse(t *testing.T) {
	var b bytes.Buffer
	testWriter.WriteChangeset(&b, successParts())
	parts, err := splitParts(b.Bytes(), testWriter.BatchBoundary, 1, "batch")
	if err != nil || len(parts) != 1 {
		t.Fatalf("%v %d", err, len(parts))
	}
	_, content, err := readMIMEHeaders(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	subs, err := splitParts(content, testWriter.ChangesetBoundary, 10, "change set")
	if err != nil || len(subs) != 4 {
		t.Fatalf("%v %d", err, len(subs))
	}
	if !bytes.HasSuffix(subs[1], []byte(`{"PartitionKey":"p","RowKey":"2"}`)) || !bytes.HasSuffix(subs[0], []byte("\r\n\r\n")) {
		t.Fatalf("parts %q", subs)
	}
}
