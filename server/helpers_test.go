package server_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// devConnectionString is the emulator's connection string for an endpoint.
func devConnectionString(endpoint string) string {
	return "DefaultEndpointsProtocol=http;AccountName=" + auth.DevAccountName + ";AccountKey=" + auth.DevAccountKey +
		";TableEndpoint=" + endpoint + "/" + auth.DevAccountName + ";"
}

// testServer is a real server on a loopback port over a store in a
// temporary directory.
type testServer struct {
	Store    *partition.Store
	Server   *server.Server
	Endpoint string // http://127.0.0.1:port, or https:// with Options.TLSConfig
	Addr     string // 127.0.0.1:port
	// ServiceURL is the account's table endpoint, as SDK clients take it.
	ServiceURL string
	// CertPath is the PEM certificate clients trust, for a TLS server
	// started by startServerFor.
	CertPath string
	// storageFailed, set by a test that broke the store's disk, lets the
	// store's Close report the failure without failing the test.
	storageFailed bool
}

// startServer starts a server for the test; it is shut down and its store
// closed when the test ends. opts may be nil.
func startServer(t testing.TB, opts *server.Options) *testServer {
	t.Helper()
	return serveStore(t, openStore(t, nil), opts)
}

// openStore opens a store in a temporary directory; serveStore closes it.
func openStore(t testing.TB, opts *partition.Options) *partition.Store {
	t.Helper()
	store, err := partition.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// serveStore starts a server for store; the server is shut down and the
// store closed when the test ends.
func serveStore(t testing.TB, store *partition.Store, opts *server.Options) *testServer {
	t.Helper()
	return serveStoreAs(t, store, store, opts)
}

// serveStoreAs starts a server answering through backend (store, or a
// cluster node's face to it); the server is shut down and store closed
// when the test ends.
func serveStoreAs(t testing.TB, store *partition.Store, backend server.Store, opts *server.Options) *testServer {
	t.Helper()
	var ts *testServer
	// Registered first, so run after the server's shutdown.
	t.Cleanup(func() {
		if err := store.Close(); err != nil && (ts == nil || !ts.storageFailed) {
			t.Errorf("closing the store: %v", err)
		}
	})
	ts = serveBackend(t, backend, opts)
	ts.Store = store
	return ts
}

// serveBackend serves backend until the test's cleanup shuts the server
// down; closing what backend holds is the caller's.
func serveBackend(t testing.TB, backend server.Store, opts *server.Options) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(backend, opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	ts := &testServer{Server: srv, Addr: ln.Addr().String()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	scheme := "http"
	if opts != nil && opts.TLSConfig != nil {
		scheme = "https"
	}
	ts.Endpoint = scheme + "://" + ts.Addr
	ts.ServiceURL = ts.Endpoint + "/" + auth.DevAccountName
	return ts
}

// rawRequest builds a request to ts's account (path below it, e.g.
// "/Tables"), signed with Shared Key Lite unless sign is false. header
// holds name, value pairs.
func rawRequest(t testing.TB, ts *testServer, method, path string, body []byte, sign bool, header ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, ts.ServiceURL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("Accept", "application/json;odata=minimalmetadata")
	req.Header.Set("DataServiceVersion", "3.0")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	date := time.Now().UTC().Format(http.TimeFormat)
	req.Header.Set("x-ms-date", date)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if sign {
		signLite(t, req, auth.DevAccountKey)
	}
	return req
}

// signLite signs req with Shared Key Lite for the development account:
// StringToSign = Date \n CanonicalizedResource, the resource being the
// account and the path (the account twice for path-style URLs) plus
// ?comp= when present.
func signLite(t testing.TB, req *http.Request, key string) {
	t.Helper()
	resource := "/" + auth.DevAccountName + req.URL.EscapedPath()
	if comp := req.URL.Query().Get("comp"); comp != "" {
		resource += "?comp=" + comp
	}
	sig, err := auth.SignString(key, req.Header.Get("x-ms-date")+"\n"+resource)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "SharedKeyLite "+auth.DevAccountName+":"+sig)
}

// send sends req and returns the response with its body read.
func send(t testing.TB, client *http.Client, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}
