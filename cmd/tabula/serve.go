package main

import (
	"context"
	"crypto/tls"
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
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/tabuladb/tabula/cluster"
	"github.com/tabuladb/tabula/partition"
	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
	"github.com/tabuladb/tabula/server/devcert"
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
	accountsFile := fs.String("accounts-file", "", "read the accounts from this file, as --accounts takes them (newlines may separate accounts), and re-read it on SIGHUP; it takes precedence over $AZURITE_ACCOUNTS")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	pprofAddr := fs.String("pprof", "", "also serve Go's net/http/pprof profiles on this address, e.g. 127.0.0.1:6060 (off by default)")
	certFile := fs.String("cert", "", "serve HTTPS with this PEM certificate (with --key)")
	keyFile := fs.String("key", "", "the PEM private key of --cert")
	selfSigned := fs.Bool("https", false, "serve HTTPS with a self-signed certificate for 127.0.0.1, localhost and *.table.localhost, made in the data directory on first start")
	oauth := fs.String("oauth", "", `"basic": accept Microsoft Entra ID bearer tokens (HTTPS only; signatures are not checked)`)
	pathStyleOnly := fs.Bool("disable-production-style-url", false, "address accounts by the path's first segment only, never by the Host's first label")
	skipVersionCheck := fs.Bool("skip-api-version-check", false, "accept any well-formed x-ms-version, not only published ones")
	maxConns := fs.Int("max-conns", 4096, "connections open at once; more are closed as they arrive")
	inMemory := fs.Bool("in-memory", false, "keep the store in memory only, lost at exit, like the emulator's --inMemoryPersistence (--data then holds only --https's certificate)")
	var cf clusterFlags
	cf.register(fs)
	var ef emulateFlags
	ef.register(fs)
	var of observeFlags
	of.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "tabula serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	switch {
	case (*certFile == "") != (*keyFile == ""):
		fmt.Fprintln(stderr, "tabula serve: --cert and --key go together")
		return 2
	case *certFile != "" && *selfSigned:
		fmt.Fprintln(stderr, "tabula serve: --https makes its own certificate; give it or --cert/--key, not both")
		return 2
	case *oauth != "" && *oauth != "basic":
		fmt.Fprintf(stderr, "tabula serve: --oauth %q: the only level is basic\n", *oauth)
		return 2
	case *oauth != "" && *certFile == "" && !*selfSigned:
		fmt.Fprintln(stderr, "tabula serve: --oauth needs HTTPS (--https, or --cert and --key): bearer tokens are never accepted over plain HTTP")
		return 2
	case *maxConns < 1:
		fmt.Fprintf(stderr, "tabula serve: --max-conns %d: want at least 1\n", *maxConns)
		return 2
	case *inMemory && (cf.join != "" || cf.nodeAddr != ""):
		fmt.Fprintln(stderr, "tabula serve: --in-memory is for a single node: a cluster's nodes keep their raft logs and stores on disk")
		return 2
	}
	limits, faults, err := ef.options(fs)
	if err != nil {
		fmt.Fprintf(stderr, "tabula serve: %v\n", err)
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "tabula serve: --log-level %q: want debug, info, warn or error\n", *level)
		return 2
	}
	log, err := of.logger(stderr, lv)
	if err != nil {
		fmt.Fprintf(stderr, "tabula serve: %v\n", err)
		return 2
	}

	accounts, custom, err := startAccounts(fs, *accountsSpec, *accountsFile)
	if err != nil {
		fmt.Fprintf(stderr, "tabula serve: %v\n", err)
		return 2
	}

	setGCPercent()
	var plan clusterPlan
	var store *partition.Store
	switch {
	case cf.join != "" || cf.nodeAddr != "":
		if plan, err = cf.prepare(*data); err != nil {
			fmt.Fprintf(stderr, "tabula serve: %v\n", err)
			return 1
		}
		store, err = cluster.OpenStore(*data, nil)
	case *inMemory:
		store, err = openInMemoryStore()
	default:
		store, err = partition.Open(*data, nil)
	}
	if err != nil {
		fmt.Fprintf(stderr, "tabula serve: cannot open the data directory %s: %v\n", *data, err)
		return 1
	}
	stopAdmin := func() {}
	if plan.dir == "" && !*inMemory {
		// A cluster node's store changes under it when a snapshot is
		// installed, and an in-memory one has no directory: backups are
		// of a single node's store on disk.
		stopAdmin = sync.OnceFunc(startAdmin(*data, store.DB(), log))
		defer stopAdmin()
	}
	var tlsConfig *tls.Config
	switch {
	case *certFile != "":
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			store.Close()
			fmt.Fprintf(stderr, "tabula serve: --cert %s --key %s: %v\n", *certFile, *keyFile, err)
			return 1
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	case *selfSigned:
		cert, path, created, err := devcert.Ensure(*data, time.Now())
		if err != nil {
			store.Close()
			fmt.Fprintf(stderr, "tabula serve: --https: %v\n", err)
			return 1
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		verb := "reusing"
		if created {
			verb = "created"
		}
		log.Info(verb+" a self-signed certificate: have clients trust it", "certificate", path)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		store.Close()
		fmt.Fprintf(stderr, "tabula serve: %v\n", err)
		return 1
	}
	// Before a cluster node starts: a failure here has only the store to close.
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

	opts := &server.Options{
		Accounts: accounts, Logger: log, TLSConfig: tlsConfig, MaxConns: *maxConns,
		PathStyleOnly: *pathStyleOnly, SkipAPIVersionCheck: *skipVersionCheck, OAuth: *oauth != "",
		Limits: limits, Faults: faults,
	}
	var backend server.Store = store
	var node *clusterSetup
	var srv *server.Server
	if plan.dir != "" { // cluster mode
		if node, err = startCluster(plan, store, log, func() { srv.ForgetCachedProperties() }); err != nil {
			ln.Close()
			store.Close()
			fmt.Fprintf(stderr, "tabula serve: %v\n", err)
			return 1
		}
		backend, opts.Front = node.node.Store(), node.http.Public
	}
	watch, err := of.start(log, opts, store, node)
	if err != nil {
		ln.Close()
		if node != nil {
			node.stop()
		} else {
			store.Close()
		}
		fmt.Fprintf(stderr, "tabula serve: %v\n", err)
		return 1
	}
	defer watch.stop()
	srv = server.New(backend, opts)
	watch.serve(srv)
	announce(log, limits, faults, srv)

	stopReload := reloadAccountsOnHangup(*accountsFile, srv, log)
	defer stopReload()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	served := srv.Start(ln)

	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
	}
	endpoint := scheme + "://" + ln.Addr().String()
	log.Info("serving the Table service", "endpoint", endpoint, "data", *data, "accounts", accounts.String())
	for _, name := range accounts.Names() {
		key := auth.DevAccountKey // the emulator's public key: printing it leaks nothing
		if custom {
			key = "<the account's key>" // never print a real secret
		}
		fmt.Fprintf(stdout, "DefaultEndpointsProtocol=%s;AccountName=%s;AccountKey=%s;TableEndpoint=%s/%s;\n", scheme, name, key, endpoint, name)
	}

	code := 0
	var nodeExited <-chan struct{} // nil, never ready, for a single node
	if node != nil {
		nodeExited = node.exited
	}
	shutdown := true
	select {
	case err := <-served:
		log.Error("server stopped", "err", err)
		code, shutdown = 1, false
	case <-nodeExited:
		if errors.Is(node.runErr, cluster.ErrRemoved) {
			log.Info("the cluster removed this node: stopping")
		} else {
			log.Error("the cluster node stopped", "err", node.runErr)
			code = 1
		}
	case <-ctx.Done():
	}
	if shutdown {
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
	if node != nil {
		if err := node.stop(); err != nil {
			log.Error("stopping the cluster node", "err", err)
			code = 1
		}
		log.Info("stopped; the store is closed")
		return code
	}
	stopAdmin() // before the store closes under a checkpoint
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

// serveGCPercent is the garbage collector's GOGC for tabula serve unless
// the environment sets one. The engine's memtables live outside the Go
// heap, so the heap holds little that lives long (the block cache, bounded
// by its size, and the catalog), and GOGC 100 collected after every few
// tens of MiB of request garbage: REST batch100 took 1.5x the CPU per
// entity of a build whose 64 MiB arenas were on the heap, and 400 brought
// it back, with a peak RSS still below that build's.
const serveGCPercent = 400

func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
}
