package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/tabuladb/tabula/server/auth"
)

// startAccounts returns the accounts serve starts with, and whether they
// are the operator's own (whose keys are never printed): from
// --accounts-file, else --accounts (whose default is $AZURITE_ACCOUNTS),
// else the emulator's development account. The file takes precedence over
// the variable, since only the file can change while the process runs;
// giving it beside an explicit --accounts is refused as ambiguous.
func startAccounts(fs *flag.FlagSet, spec, file string) (*auth.Accounts, bool, error) {
	if file != "" {
		explicit := false
		fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "accounts" })
		if explicit {
			return nil, false, fmt.Errorf("--accounts and --accounts-file: give one of them")
		}
		a, err := readAccountsFile(file)
		return a, true, err
	}
	if strings.TrimSpace(spec) == "" {
		return auth.DefaultAccounts(), false, nil
	}
	a, err := auth.ParseAccounts(spec)
	if err != nil {
		return nil, false, fmt.Errorf("--accounts: %w", err)
	}
	return a, true, nil
}

// readAccountsFile reads an accounts file: the AZURITE_ACCOUNTS format,
// with newlines as well as ';' between accounts. Its errors name the file
// but never a key.
func readAccountsFile(path string) (*auth.Accounts, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--accounts-file: %w", err)
	}
	a, err := auth.ParseAccounts(string(b))
	if err != nil {
		return nil, fmt.Errorf("--accounts-file %s: %w", path, err)
	}
	return a, nil
}

// accountSetter is what a reload hands a new account set to: the server.
type accountSetter interface {
	SetAccounts(*auth.Accounts)
}

// reloadAccountsOnHangup re-reads the accounts file on every SIGHUP and,
// when it parses whole, hands the new set to srv; a file that does not
// parse is refused with a logged error and the set in force stays, so a
// half-written or mistyped file never locks clients out. Without a file
// (accounts from --accounts or AZURITE_ACCOUNTS, which a running process
// cannot see change) SIGHUP only logs that there is nothing to re-read,
// rather than killing the server as its default action would. The
// returned function stops listening for SIGHUP and waits for a reload in
// progress.
func reloadAccountsOnHangup(path string, srv accountSetter, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-hup:
			}
			if path == "" {
				log.Warn("SIGHUP: no --accounts-file to re-read; accounts from --accounts or AZURITE_ACCOUNTS are fixed for the process's life")
				continue
			}
			a, err := readAccountsFile(path)
			if err != nil {
				log.Error("SIGHUP: accounts file refused; the accounts in force stay", "file", path, "err", err)
				continue
			}
			srv.SetAccounts(a)
			log.Info("SIGHUP: accounts reloaded", "file", path, "accounts", a.String())
		}
	})
	if path != "" {
		log.Info("SIGHUP re-reads the accounts file", "file", path)
	}
	return sync.OnceFunc(func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	})
}
