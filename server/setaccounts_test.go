package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabuladb/tabula/server"
	"github.com/tabuladb/tabula/server/auth"
)

// Keys of the rotation tests: base64 of distinct bytes.
const (
	rotKeyA = "a2V5LUEta2V5LUEta2V5LUEta2V5LUEta2V5LUE="
	rotKeyB = "a2V5LUIta2V5LUIta2V5LUIta2V5LUIta2V5LUI="
	rotKeyC = "a2V5LUMta2V5LUMta2V5LUMta2V5LUMta2V5LUM="
)

var keyName = map[string]string{rotKeyA: "A", rotKeyB: "B", rotKeyC: "C"}

func mustAccounts(t testing.TB, spec string) *auth.Accounts {
	t.Helper()
	a, err := auth.ParseAccounts(spec)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// accountRequest is a Query Tables request to account on ts, signed with
// key by Shared Key Lite (unsigned for an empty key). hostStyle addresses
// the account by the Host (account.table.localhost) rather than the path.
func accountRequest(t testing.TB, ts *testServer, account, key string, hostStyle bool, body io.Reader) *http.Request {
	t.Helper()
	method, path := http.MethodGet, "/Tables"
	if body != nil {
		method = http.MethodPost
	}
	url, resource := ts.Endpoint+"/"+account+path, "/"+account+"/"+account+path
	if hostStyle {
		url, resource = ts.Endpoint+path, "/"+account+path
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if hostStyle {
		req.Host = account + ".table.localhost"
	}
	date := time.Now().UTC().Format(http.TimeFormat)
	req.Header.Set("x-ms-date", date)
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("Accept", "application/json;odata=nometadata")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		sig, err := auth.SignString(key, date+"\n"+resource)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "SharedKeyLite "+account+":"+sig)
	}
	return req
}

// statusCode sends req and returns its status and the service's error code.
func statusCode(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	resp, body := send(t, http.DefaultClient, req)
	var e struct {
		Error struct{ Code string } `json:"odata.error"`
	}
	json.Unmarshal(body, &e)
	return resp.StatusCode, e.Error.Code
}

// TestSetAccountsRotatesKeys swaps the account set of a running server:
// a request that arrives after SetAccounts sees the new set whole (the
// old key refused, the new one, a second key and a new account served,
// production-style URLs included), and a request already in flight when
// the set changes finishes with the set it arrived with.
func TestSetAccountsRotatesKeys(t *testing.T) {
	ts := startServer(t, &server.Options{Accounts: mustAccounts(t, "acct1:"+rotKeyA)})
	expect := func(account, key string, hostStyle bool, status int, code string) {
		t.Helper()
		if got, gotCode := statusCode(t, accountRequest(t, ts, account, key, hostStyle, nil)); got != status || gotCode != code {
			t.Errorf("%s with key %s (host style %v): %d %q, want %d %q", account, keyName[key], hostStyle, got, gotCode, status, code)
		}
	}
	expect("acct1", rotKeyA, false, 200, "")
	expect("acct1", rotKeyB, false, 403, "AuthenticationFailed")

	// A Create Table authenticated before the swap whose body arrives
	// after. With Expect: 100-continue the client sends the body only
	// once the handler reads it, so the first Write returning means the
	// request is past authentication.
	pr, pw := io.Pipe()
	inFlight := make(chan int, 1)
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	go func() {
		req := accountRequest(t, ts, "acct1", rotKeyA, false, pr)
		req.Header.Set("Expect", "100-continue")
		resp, err := client.Do(req)
		if err != nil {
			inFlight <- -1
			return
		}
		resp.Body.Close()
		inFlight <- resp.StatusCode
	}()
	if _, err := pw.Write([]byte(`{"TableName":`)); err != nil {
		t.Fatal(err)
	}

	ts.Server.SetAccounts(mustAccounts(t, "acct1:"+rotKeyC+":"+rotKeyB+";acct2:"+rotKeyA))
	if got := ts.Server.Accounts().Names(); strings.Join(got, ",") != "acct1,acct2" {
		t.Fatalf("Accounts() = %v after SetAccounts", got)
	}
	pw.Write([]byte(`"inflight"}`))
	pw.Close()
	if status := <-inFlight; status != http.StatusCreated && status != http.StatusNoContent {
		t.Errorf("the insert in flight across the swap answered %d, want it created", status)
	}

	expect("acct1", rotKeyA, false, 403, "AuthenticationFailed")
	expect("acct1", rotKeyC, false, 200, "")
	expect("acct1", rotKeyB, false, 200, "") // key2
	expect("acct2", rotKeyA, false, 200, "")
	expect("acct2", rotKeyA, true, 200, "") // the Host names an account only the new set has
	expect("acct1", rotKeyB, true, 200, "")
}

// TestSetAccountsUnderLoad swaps sets while requests run, under the race
// detector: every answer is a success or an authentication failure, never
// anything a half-swapped set could cause.
func TestSetAccountsUnderLoad(t *testing.T) {
	setA, setB := mustAccounts(t, "acct1:"+rotKeyA), mustAccounts(t, "acct1:"+rotKeyB)
	ts := startServer(t, &server.Options{Accounts: setA})
	stop := make(chan struct{})
	var swaps atomic.Int64
	var swapper sync.WaitGroup
	swapper.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				ts.Server.SetAccounts(setB)
			} else {
				ts.Server.SetAccounts(setA)
			}
			swaps.Add(1)
			time.Sleep(100 * time.Microsecond)
		}
	})
	var clients sync.WaitGroup
	for c := range 4 {
		clients.Go(func() {
			for i := range 50 {
				key := rotKeyA
				if (c+i)%2 == 1 {
					key = rotKeyB
				}
				status, code := statusCode(t, accountRequest(t, ts, "acct1", key, false, nil))
				if status != 200 && (status != 403 || code != "AuthenticationFailed") {
					t.Errorf("answer %d %q during swaps", status, code)
				}
			}
		})
	}
	before := swaps.Load()
	clients.Wait()
	close(stop)
	swapper.Wait()
	if swaps.Load()-before < 2 {
		t.Errorf("%d swaps while the requests ran: the test swapped nothing under them", swaps.Load()-before)
	}
}

func TestSetAccountsRefusesNil(t *testing.T) {
	ts := startServer(t, nil)
	// A request first, so Serve has begun before the test's cleanup shuts
	// the server down.
	if status, _ := statusCode(t, accountRequest(t, ts, auth.DevAccountName, auth.DevAccountKey, false, nil)); status != 200 {
		t.Fatalf("Query Tables: %d", status)
	}
	defer func() {
		if recover() == nil {
			t.Error("SetAccounts(nil) did not panic")
		}
		if !ts.Server.Accounts().Has(auth.DevAccountName) {
			t.Error("the accounts changed after SetAccounts(nil)")
		}
	}()
	ts.Server.SetAccounts(nil)
}
