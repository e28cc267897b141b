package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// signedAt builds a request to rawURL, sent to ts whatever its host, and
// signs it with Shared Key Lite over resource (the canonicalized resource
// the client chose).
func signedAt(t *testing.T, method, rawURL, resource string, body []byte) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	date := time.Now().UTC().Format(http.TimeFormat)
	req.Header.Set("x-ms-date", date)
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("Accept", "application/json;odata=minimalmetadata")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	sig, err := auth.SignString(auth.DevAccountKey, date+"\n"+resource)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "SharedKeyLite "+auth.DevAccountName+":"+sig)
	return req
}

// TestProductionStyleURLs addresses the account through the Host's first
// label: the path starts at the resource, Shared Key signs it so, and the
// URLs the server answers with name no account segment.
func TestProductionStyleURLs(t *testing.T) {
	ts := startServer(t, nil)
	c := ts.httpClient(t)
	w := sdkWay{hostStyle: true}
	base := ts.accountURL(w) // http://devstoreaccount1.table.localhost:port

	resp, body := send(t, c, signedAt(t, "POST", base+"/Tables", "/devstoreaccount1/Tables", []byte(`{"TableName":"hosted"}`)))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create table: %d %s", resp.StatusCode, body)
	}
	if loc := resp.Header.Get("Location"); loc != base+"/Tables('hosted')" {
		t.Errorf("Location %q, want %q", loc, base+"/Tables('hosted')")
	}
	var created map[string]string
	json.Unmarshal(body, &created)
	if created["odata.metadata"] != base+"/$metadata#Tables/@Element" {
		t.Errorf("odata.metadata %q", created["odata.metadata"])
	}

	// The path-style signature (account twice) names another resource on
	// a production-style URL: refused.
	resp, body = send(t, c, signedAt(t, "GET", base+"/Tables", "/devstoreaccount1/devstoreaccount1/Tables", nil))
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("path-style signature on a production URL: %d %s", resp.StatusCode, body)
	}
	// The secondary's host label.
	_, port, _ := strings.Cut(ts.Addr, ":")
	secondary := "http://devstoreaccount1-secondary.table.localhost:" + port
	resp, body = send(t, c, signedAt(t, "GET", secondary+"/?restype=service&comp=stats", "/devstoreaccount1/?comp=stats", nil))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<Status>live</Status>") {
		t.Errorf("stats on the secondary host: %d %s", resp.StatusCode, body)
	}

	// A host whose first label is no account, and an IP address, leave
	// the URL path-style.
	for _, host := range []string{"other.table.localhost", "127.0.0.1"} {
		resp, body = send(t, c, signedAt(t, "GET", "http://"+host+":"+port+"/devstoreaccount1/Tables", "/devstoreaccount1/devstoreaccount1/Tables", nil))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"hosted"`) {
			t.Errorf("path-style through %s: %d %s", host, resp.StatusCode, body)
		}
	}
}

// TestPathStyleOnly turns production-style URLs off: the account Host is
// ignored and the path's first segment is the account.
func TestPathStyleOnly(t *testing.T) {
	ts := startServer(t, &server.Options{PathStyleOnly: true})
	c := ts.httpClient(t)
	base := ts.accountURL(sdkWay{hostStyle: true})
	resp, body := send(t, c, signedAt(t, "GET", base+"/Tables", "/devstoreaccount1/Tables", nil))
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("a production-style URL was served with PathStyleOnly: %s", body)
	}
	resp, body = send(t, c, signedAt(t, "GET", base+"/devstoreaccount1/Tables", "/devstoreaccount1/devstoreaccount1/Tables", nil))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("path-style through an account host: %d %s", resp.StatusCode, body)
	}
}

// TestBearerOverTheWire checks the answers a client sees for bearer
// tokens: refusals with the service's code and challenge, plain HTTP
// refused, the ACL operations missing, and tokens refused when OAuth is
// off.
func TestBearerOverTheWire(t *testing.T) {
	w := sdkWay{tls: true, hostStyle: true, bearer: true}
	ts := startServerFor(t, w, nil)
	get := func(to *testServer, url, tok string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("x-ms-version", "2019-02-02")
		req.Header.Set("Accept", "application/json;odata=nometadata")
		return send(t, to.httpClient(t), req)
	}
	now := time.Now()
	good := map[string]any{"aud": "https://storage.azure.com", "iss": "https://sts.windows.net/" + testTenant + "/", "tid": testTenant,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	resp, body := get(ts, ts.accountURL(w)+"/Tables", mintToken(good))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a good token: %d %s", resp.StatusCode, body)
	}
	expired := map[string]any{}
	for k, v := range good {
		expired[k] = v
	}
	expired["exp"] = now.Add(-time.Hour).Unix()
	resp, body = get(ts, ts.accountURL(w)+"/Tables", mintToken(expired))
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("x-ms-error-code") != "InvalidAuthenticationInfo" ||
		resp.Header.Get("WWW-Authenticate") != "Bearer authorization_uri=https://login.microsoftonline.com/"+testTenant+"/oauth2/authorize resource_id=https://storage.azure.com" ||
		!strings.Contains(string(body), `"code":"InvalidAuthenticationInfo"`) {
		t.Errorf("an expired token: %d %v %s", resp.StatusCode, resp.Header, body)
	}

	// The SDK with a token credential: ACLs are not served to tokens.
	svc := ts.serviceClient(t, w)
	ctx := context.Background()
	if _, err := svc.CreateTable(ctx, "acls", nil); err != nil {
		t.Fatal(err)
	}
	_, err := svc.NewClient("acls").GetAccessPolicy(ctx, nil)
	wantSDKError(t, "GetAccessPolicy with a token", err, http.StatusNotFound, "ResourceNotFound")

	// OAuth off: a token is just an unknown scheme.
	plain := startServerFor(t, sdkWay{tls: true}, nil)
	resp, body = get(plain, plain.ServiceURL+"/Tables", mintToken(good))
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("x-ms-error-code") != "AuthenticationFailed" {
		t.Errorf("a token with OAuth off: %d %s", resp.StatusCode, body)
	}
	// OAuth on but plain HTTP: refused before the token is read.
	overHTTP := startServer(t, &server.Options{OAuth: true})
	resp, body = get(overHTTP, overHTTP.ServiceURL+"/Tables", mintToken(good))
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("x-ms-error-code") != "AuthenticationFailed" {
		t.Errorf("a token over plain HTTP: %d %s", resp.StatusCode, body)
	}
	// The Go SDK itself refuses to send a token over plain HTTP.
	sdk, err := aztables.NewServiceClient(overHTTP.ServiceURL, tokenCredential{},
		&aztables.ClientOptions{ClientOptions: policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.CreateTable(ctx, "never", nil); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("the SDK sent a token over http: %v", err)
	}
}

// TestAPIVersions accepts every version the service has published, the
// newest included, answering with it; refuses an unknown one; and, with
// SkipAPIVersionCheck, accepts any well-formed one but still no garbage.
func TestAPIVersions(t *testing.T) {
	strict := startServer(t, nil)
	loose := startServer(t, &server.Options{SkipAPIVersionCheck: true})
	c := &http.Client{}
	for _, tc := range []struct {
		ts            *testServer
		version       string
		status        int
		answerVersion string
	}{
		{strict, "2019-02-02", 200, "2019-02-02"},
		{strict, "2025-11-05", 200, "2025-11-05"},
		{strict, "2026-06-06", 200, "2026-06-06"},
		{strict, "2027-01-01", 400, "2019-02-02"},
		{strict, "2019-02-03", 400, "2019-02-02"},
		{loose, "2027-01-01", 200, "2027-01-01"},
		{loose, "2027-13-01", 400, "2019-02-02"},
		{loose, "latest", 400, "2019-02-02"},
	} {
		resp, body := send(t, c, rawRequest(t, tc.ts, "GET", "/Tables", nil, true, "x-ms-version", tc.version))
		if resp.StatusCode != tc.status || resp.Header.Get("x-ms-version") != tc.answerVersion {
			t.Errorf("x-ms-version %s (skip check %v): %d, answered as %s; want %d and %s: %s",
				tc.version, tc.ts == loose, resp.StatusCode, resp.Header.Get("x-ms-version"), tc.status, tc.answerVersion, body)
		}
	}
}
