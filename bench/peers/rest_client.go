package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// tableClient sends Shared Key signed Table service requests over a pool
// of keep-alive connections.
type tableClient struct {
	endpoint string // http://host:port/account
	key      []byte
	http     *http.Client
}

func newTableClient(endpoint string, conns int) *tableClient {
	key, _ := base64.StdEncoding.DecodeString(devKey)
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: time.Minute}
	return &tableClient{endpoint: endpoint, key: key, http: &http.Client{Transport: tr, Timeout: 5 * time.Minute}}
}

// response is an answer with its body read.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends method on path (below the account, already escaped) and
// returns the answer. A transport failure is an error; any status is not.
func (c *tableClient) do(method, path, contentType string, body []byte, header ...string) (response, error) {
	req, err := c.request(method, path, contentType, body, header...)
	if err != nil {
		return response{}, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// request builds and signs the request do sends.
func (c *tableClient) request(method, path, contentType string, body []byte, header ...string) (*http.Request, error) {
	req, err := http.NewRequest(method, c.endpoint+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	h := req.Header
	h.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	h.Set("x-ms-version", "2019-02-02")
	h.Set("Accept", "application/json;odata=nometadata")
	h.Set("DataServiceVersion", "3.0")
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		h.Set(header[i], header[i+1])
	}
	c.sign(req)
	return req, nil
}

// sign adds the Table service's Shared Key signature: HMAC-SHA256 of
// VERB, Content-MD5, Content-Type, date and the canonicalized resource
// ("/account" + path, plus ?comp= when present).
func (c *tableClient) sign(req *http.Request) {
	resource := "/" + devAccount + req.URL.EscapedPath()
	if comp := req.URL.Query().Get("comp"); comp != "" {
		resource += "?comp=" + comp
	}
	s := strings.Join([]string{req.Method, req.Header.Get("Content-MD5"), req.Header.Get("Content-Type"), req.Header.Get("x-ms-date"), resource}, "\n")
	mac := hmac.New(sha256.New, c.key)
	mac.Write([]byte(s))
	req.Header.Set("Authorization", "SharedKey "+devAccount+":"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// entityPath is the URL path of an entity.
func entityPath(table, pk, rk string) string {
	q := func(s string) string { return url.PathEscape(strings.ReplaceAll(s, "'", "''")) }
	return "/" + table + "(PartitionKey='" + q(pk) + "',RowKey='" + q(rk) + "')"
}

// benchEntityJSON is a benchmark entity: a few typed properties, about
// 200 bytes of JSON.
func benchEntityJSON(pk, rk string, n int) []byte {
	return fmt.Appendf(nil, `{"PartitionKey":%q,"RowKey":%q,"Name":"entity %s of %s","Count":%d,"Big@odata.type":"Edm.Int64","Big":"%d","Score":%d.5,"Active":%t,"Tag":"tag%d"}`,
		pk, rk, rk, pk, n, int64(n)*1_000_003, n%1000, n%2 == 0, n%97)
}

// batchBody is a $batch of inserts of entities (pk, rks[i]).
func batchBody(endpoint, table, pk string, rks []string, n int) (contentType string, body []byte) {
	var b bytes.Buffer
	b.WriteString("--batch_bench\r\nContent-Type: multipart/mixed; boundary=changeset_bench\r\n\r\n")
	for i, rk := range rks {
		fmt.Fprintf(&b, "--changeset_bench\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"+
			"POST %s/%s HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json;odata=nometadata\r\nPrefer: return-no-content\r\nDataServiceVersion: 3.0\r\n\r\n%s\r\n",
			endpoint, table, benchEntityJSON(pk, rk, n+i))
	}
	b.WriteString("--changeset_bench--\r\n--batch_bench--\r\n")
	return "multipart/mixed; boundary=batch_bench", b.Bytes()
}

// answered turns do's results into an operation's outcome: ok for a
// success, else an error naming the transport failure or the status and
// the start of the body.
func answered(r response, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	if !r.ok() {
		body := r.body
		if len(body) > 200 {
			body = body[:200]
		}
		return false, fmt.Errorf("HTTP %d: %s", r.status, bytes.TrimSpace(body))
	}
	return true, nil
}

// ok reports whether a status is a success, and a $batch's 202 only when
// no operation in it failed.
func (r response) ok() bool {
	if r.status == http.StatusAccepted && bytes.Contains(r.body, []byte("odata.error")) {
		return false
	}
	return r.status >= 200 && r.status < 300
}
