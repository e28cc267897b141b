package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/tabuladb/tabula/lsm"
)

// adminSocketName is the Unix socket a running server listens on, inside
// its store directory, for the commands that must run in the process that
// holds the store: `tabula backup` asks it for a checkpoint. A Unix socket
// in the store directory is reachable only by whoever can enter that
// directory (the store's owner: lsm creates it 0700), needs no port and no
// key, and is found from --data alone. docs/backup.md describes the
// protocol.
const adminSocketName = "tabula-admin.sock"

// checkpointRequest and checkpointResponse are the JSON bodies of
// POST /checkpoint on the admin socket.
type checkpointRequest struct {
	Dir string `json:"dir"` // absolute; must not exist or be empty
}

type checkpointResponse struct {
	Seq   uint64 `json:"seq,omitempty"`
	Error string `json:"error,omitempty"`
}

// startAdmin serves the admin socket of the store directory dir, whose
// engine is db, until the returned stop is called. serve calls it right
// after opening the store (the one line, in serve.go, after the store is
// open and before serving):
//
//	defer startAdmin(storeDir, store.DB(), log)()
//
// It never fails the server: if the socket cannot be made (a directory
// path longer than a socket address allows, say) it logs why and returns
// a stop that does nothing, and `tabula backup` then says the server
// offers no admin socket.
func startAdmin(dir string, db *lsm.DB, log *slog.Logger) (stop func()) {
	path := filepath.Join(dir, adminSocketName)
	// The caller holds the store's lock, so a socket file left here is a
	// dead server's.
	os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		log.Warn("no admin socket: tabula backup cannot reach this server", "socket", path, "err", err)
		return func() {}
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		log.Warn("no admin socket: tabula backup cannot reach this server", "socket", path, "err", err)
		return func() {}
	}
	srv := &http.Server{Handler: adminHandler(db, log), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	log.Info("admin socket (tabula backup)", "socket", path)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}
}

func adminHandler(db *lsm.DB, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /checkpoint", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var req checkpointRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || !filepath.IsAbs(req.Dir) {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(checkpointResponse{Error: fmt.Sprintf("want {\"dir\": an absolute path} (%v)", err)})
			return
		}
		start := time.Now()
		seq, err := db.Checkpoint(req.Dir)
		if err != nil {
			log.Error("checkpoint for a backup", "dir", req.Dir, "err", err)
			w.WriteHeader(http.StatusInternalServerError)
			json.NewEncoder(w).Encode(checkpointResponse{Error: err.Error()})
			return
		}
		log.Info("checkpoint for a backup", "dir", req.Dir, "seq", seq, "duration", time.Since(start))
		json.NewEncoder(w).Encode(checkpointResponse{Seq: seq})
	})
	return mux
}

// errNoAdmin means no server answers on the store's admin socket.
var errNoAdmin = errors.New("no server answers on the admin socket")

// requestCheckpoint asks the server holding the store in dataDir for a
// checkpoint into ckDir. It returns errNoAdmin (wrapped) when there is no
// socket or nobody listens on it.
func requestCheckpoint(ctx context.Context, dataDir, ckDir string) (uint64, error) {
	path := filepath.Join(dataDir, adminSocketName)
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return 0, fmt.Errorf("%w (%s): %w", errNoAdmin, path, err)
	}
	conn.Close()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	defer client.CloseIdleConnections()
	body, _ := json.Marshal(checkpointRequest{Dir: ckDir})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://tabula-admin/checkpoint", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("admin socket %s: %w", path, err)
	}
	defer resp.Body.Close()
	var out checkpointResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("admin socket %s: %s, unreadable answer: %w", path, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || out.Error != "" {
		return 0, fmt.Errorf("the server refused the checkpoint: %s", out.Error)
	}
	return out.Seq, nil
}
