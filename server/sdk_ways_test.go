package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/server/devcert"
)

// sdkWay is one way an application reaches the service with the Go SDK:
// the scheme, the URL style and the credential.
type sdkWay struct {
	name      string
	tls       bool // https, the server's certificate trusted by the client
	hostStyle bool // https://devstoreaccount1.table.localhost:port, not /devstoreaccount1
	bearer    bool // a Microsoft Entra ID token instead of the account key
	cluster   bool // a follower of a three-node cluster, forwarding to the leader
	ranges    bool // the cluster gives every table a range group of its own
}

// sdkWays are run by the SDK suites: the emulator's plain path-style URLs
// with Shared Key, the same over TLS, production-style URLs, and bearer
// tokens on production-style URLs (as an application on the real service
// uses them).
var sdkWays = []sdkWay{
	{name: "http"},
	{name: "https", tls: true},
	{name: "https-host", tls: true, hostStyle: true},
	{name: "https-bearer", tls: true, hostStyle: true, bearer: true},
	{name: "cluster", cluster: true},
	{name: "cluster-ranges", cluster: true, ranges: true},
}

// eachWay runs test once per way, as subtests.
func eachWay(t *testing.T, test func(t *testing.T, w sdkWay)) {
	for _, w := range sdkWays {
		t.Run(w.name, func(t *testing.T) { test(t, w) })
	}
}

// testTLS makes a self-signed certificate for a test server: its TLS
// config, and the path of the PEM file clients trust.
func testTLS(t testing.TB) (*tls.Config, string) {
	t.Helper()
	certPEM, keyPEM, err := devcert.Generate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cert.pem")
	if err := os.WriteFile(path, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}, path
}

// startServerFor starts a server that w can reach: with TLS and bearer
// tokens when w needs them.
func startServerFor(t testing.TB, w sdkWay, opts *server.Options) *testServer {
	t.Helper()
	o := server.Options{}
	if opts != nil {
		o = *opts
	}
	var certPath string
	if w.tls {
		o.TLSConfig, certPath = testTLS(t)
	}
	o.OAuth = o.OAuth || w.bearer
	if w.cluster {
		return startClusterServer(t, &o, w.ranges)
	}
	ts := startServer(t, &o)
	ts.CertPath = certPath
	return ts
}

// httpClient is an HTTP client for ts: it trusts ts's certificate and
// sends every host name (devstoreaccount1.table.localhost) to ts's
// address, as a resolver that maps *.localhost to loopback would.
func (ts *testServer) httpClient(t testing.TB) *http.Client {
	t.Helper()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, ts.Addr)
		},
		ForceAttemptHTTP2: true,
	}
	if ts.CertPath != "" {
		pem, err := os.ReadFile(ts.CertPath)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// accountURL is the account's table endpoint in w's URL style.
func (ts *testServer) accountURL(w sdkWay) string {
	if !w.hostStyle {
		return ts.ServiceURL
	}
	scheme, _, _ := strings.Cut(ts.Endpoint, "://")
	_, port, _ := net.SplitHostPort(ts.Addr)
	return scheme + "://" + auth.DevAccountName + ".table.localhost:" + port
}

// serviceClient is an SDK service client of ts that reaches it w's way.
func (ts *testServer) serviceClient(t testing.TB, w sdkWay) *aztables.ServiceClient {
	t.Helper()
	opts := &aztables.ClientOptions{ClientOptions: policy.ClientOptions{
		Retry:     policy.RetryOptions{MaxRetries: -1},
		Transport: ts.httpClient(t),
	}}
	var (
		svc *aztables.ServiceClient
		err error
	)
	if w.bearer {
		svc, err = aztables.NewServiceClient(ts.accountURL(w), tokenCredential{}, opts)
	} else {
		cred, cerr := aztables.NewSharedKeyCredential(auth.DevAccountName, auth.DevAccountKey)
		if cerr != nil {
			t.Fatal(cerr)
		}
		svc, err = aztables.NewServiceClientWithSharedKey(ts.accountURL(w), cred, opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// tokenCredential mints access tokens shaped like those Microsoft Entra
// ID issues for Azure Storage. They are not signed by Entra ID: the
// server, like the emulator, checks the claims only.
type tokenCredential struct{}

func (tokenCredential) GetToken(_ context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	now := time.Now()
	aud := "https://storage.azure.com"
	if len(opts.Scopes) == 1 {
		aud = strings.TrimSuffix(opts.Scopes[0], "/.default")
	}
	claims := map[string]any{"aud": aud, "iss": "https://sts.windows.net/" + testTenant + "/", "tid": testTenant,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(), "oid": "00000000-0000-0000-0000-000000000001"}
	return azcore.AccessToken{Token: mintToken(claims), ExpiresOn: now.Add(time.Hour)}, nil
}

const testTenant = "72f988bf-86f1-41af-91ab-2d7cd011db47"

// mintToken encodes claims as an unsigned-in-spirit JWT (the signature
// segment is filler).
func mintToken(claims map[string]any) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(claims) + "." + base64.RawURLEncoding.EncodeToString([]byte("not-a-signature"))
}
