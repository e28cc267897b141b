package server_test

import (
	"context"
	"errors"
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
	Endpoint string // http://127.0.0.1:port
	// ServiceURL is the account's table endpoint, as SDK clients take it.
	ServiceURL string
}

// startServer starts a server for the test; it is shut down and its store
// closed when the test ends. opts may be nil.
func startServer(t testing.TB, opts *server.Options) *testServer {
	t.Helper()
	store, err := partition.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	srv := server.New(store, opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		if err := store.Close(); err != nil {
			t.Errorf("closing the store: %v", err)
		}
	})
	endpoint := "http://" + ln.Addr().String()
	return &testServer{Store: store, Server: srv, Endpoint: endpoint, ServiceURL: endpoint + "/" + auth.DevAccountName}
}
