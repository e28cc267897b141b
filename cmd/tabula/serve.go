package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// shutdownGrace is how long a stopping server waits for requests in flight.
const shutdownGrace = 30 * time.Second

// serve runs the Table service until SIGINT or SIGTERM, then stops
// accepting, lets requests in flight finish and closes the store.
func serve(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:10002", "address to listen on (the emulator's table port)")
	data := fs.String("data", "./tabula-data", "data directory, created if missing")
	accountsSpec := fs.String("accounts", os.Getenv("AZURITE_ACCOUNTS"),
		`accounts and keys, "name1:key1[:key2];name2:key1" (default $AZURITE_ACCOUNTS, else devstoreaccount1)`)
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	pprofAddr := fs.String("pprof", "", "also serve Go's net/http/pprof profiles on this address, e.g. 127.0.0.1:6060 (off by default)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "tabula serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "tabula serve: --log-level %q: want debug, info, warn or error\n", *level)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lv}))

	accounts, custom := auth.DefaultAccounts(), strings.TrimSpace(*accountsSpec) != ""
	if custom {
		var err error
		if accounts, err = auth.ParseAccounts(*accountsSpec); err != nil {
			fmt.Fprintf(stderr, "tabula serve: --accounts: %v\n", err)
			return 2
		}
	}

	store, err := partition.Open(*data, nil)
	if err != nil {
		fmt.Fprintf(stderr, "tabula serve: cannot open the data directory %s: %v\n", *data, err)
		return 1
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		store.Close()
		fmt.Fprintf(stderr, "tabula serve: %v\n", err)
		return 1
	}
	srv := server.New(store, &server.Options{Accounts: accounts, Logger: log})

	if *pprofAddr != "" {
		pln, err := net.Listen("tcp", *pprofAddr)
		if err != nil {
			ln.Close()
			store.Close()
			fmt.Fprintf(stderr, "tabula serve: --pprof: %v\n", err)
			return 1
		}
		defer pln.Close()
		go http.Serve(pln, profileHandler())
		log.Info("serving profiles", "endpoint", "http://"+pln.Addr().String()+"/debug/pprof/")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	endpoint := "http://" + ln.Addr().String()
	log.Info("serving the Table service", "endpoint", endpoint, "data", *data, "accounts", accounts.String())
	for _, name := range accounts.Names() {
		key := auth.DevAccountKey // the emulator's public key: printing it leaks nothing
		if custom {
			key = "<the account's key>" // never print a real secret
		}
		fmt.Fprintf(stdout, "DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=%s/%s;\n", name, key, endpoint, name)
	}

	code := 0
	select {
	case err := <-served:
		log.Error("server stopped", "err", err)
		code = 1
	case <-ctx.Done():
		log.Info("shutting down: finishing requests in flight")
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		if err := srv.Shutdown(sctx); err != nil {
			log.Error("shutdown", "err", err)
			code = 1
		}
		cancel()
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("server", "err", err)
			code = 1
		}
	}
	if err := store.Close(); err != nil {
		log.Error("closing the store", "err", err)
		return 1
	}
	log.Info("stopped; the store is closed")
	return code
}

// profileHandler serves net/http/pprof on a mux of its own, so profiles are
// never reachable through the Table service's address.
func profileHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
