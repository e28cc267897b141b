package batch

import (
	"strings"
	"testing"
)

// TestFirstTable reads the table of a batch's first operation from the
// start of bodies as the SDKs write them, with absolute, host-style and
// relative URLs, and finds none where there is none.
func TestFirstTable(t *testing.T) {
	insert := func(url string) []goSub {
		return []goSub{
			{"POST", url, map[string]string{"Content-Type": "application/json"}, `{"PartitionKey":"p","RowKey":"1"}`},
			{"DELETE", "http://127.0.0.1:10002/devstoreaccount1/Other(PartitionKey='p',RowKey='2')", map[string]string{"If-Match": "*"}, ""},
		}
	}
	for _, c := range []struct {
		name, account, want string
		body                string
	}{
		{"go sdk, path style", "devstoreaccount1", "MyTable", string(goSDKBody(t, batchID, changesetID, insert(base+"MyTable?%24format=application%2Fjson")))},
		{"js sdk, path style", "devstoreaccount1", "MyTable", jsSDKBody(insert(base + "MyTable"))},
		{"js sdk, lf only", "devstoreaccount1", "MyTable", strings.ReplaceAll(jsSDKBody(insert(base+"MyTable")), "\r\n", "\n")},
		{"host style", "", "MyTable", jsSDKBody(insert("https://devstoreaccount1.table.core.windows.net/MyTable"))},
		{"relative", "devstoreaccount1", "MyTable", jsSDKBody(insert("MyTable(PartitionKey='p',RowKey='1')"))},
		{"an entity", "devstoreaccount1", "t1", jsSDKBody([]goSub{{"MERGE", base + "t1(PartitionKey='a%27%27b',RowKey='c')", nil, "{}"}})},
		{"no request line", "devstoreaccount1", "", "--batch_x\r\nContent-Type: multipart/mixed\r\n\r\n"},
		{"a tables url", "devstoreaccount1", "", jsSDKBody([]goSub{{"POST", base + "Tables", nil, "{}"}})},
		{"a request line cut short", "devstoreaccount1", "", cutInRequestLine(jsSDKBody(insert(base + "MyTable")))},
	} {
		if got := FirstTable([]byte(c.body), c.account); got != c.want {
			t.Errorf("%s: FirstTable = %q, want %q\n%s", c.name, got, c.want, c.body)
		}
	}
}

// cutInRequestLine cuts a body in the middle of its first request line,
// as a peek of too few bytes would.
func cutInRequestLine(body string) string {
	i := strings.Index(body, "POST ")
	return body[:i+len("POST http://127.0")]
}
