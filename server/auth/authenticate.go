package auth

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Address is where a request was sent, as the router read its URL.
type Address struct {
	// Account is the account addressed, without any "-secondary" suffix.
	Account string
	// HostStyle says the account was named by the Host header's first
	// label (a production-style URL, devstoreaccount1.table.localhost),
	// so the path starts at the resource; otherwise the path's first
	// segment names the account (path-style, as the emulator's URLs).
	HostStyle bool
}

// Authenticate establishes who sent r to the account at addresses, as of
// now.
//
// A request with an Authorization header must carry a valid SharedKey or
// SharedKeyLite signature made with either of the account's keys, dated
// (x-ms-date, else Date) within MaxClockSkew of now. A request without one
// must carry a shared access signature in its query string: an account SAS
// (it has ss and srt) or a table service SAS; lookup resolves the stored
// access policy a service SAS names with si, and may be nil when the caller
// has no policies. SAS requests must also come from an address in sip and
// over a protocol spr allows (r.TLS decides https; a proxy-aware caller
// adjusts r.RemoteAddr and r.TLS first).
//
// Every refusal is an *Error with the service's status and code; an error
// from lookup is returned as is.
func (a *Accounts) Authenticate(ctx context.Context, r *http.Request, at Address, now time.Time, lookup PolicyLookup) (*Principal, error) {
	acct, err := a.account(at.Account)
	if err != nil {
		return nil, err
	}
	if h := r.Header.Values("Authorization"); len(h) > 0 {
		if len(h) > 1 {
			return nil, authFailed("The request has more than one Authorization header.")
		}
		kind, e := verifySharedKey(r, acct, at.HostStyle, h[0], now)
		if e != nil {
			return nil, e
		}
		return &Principal{Account: acct.name, Kind: kind}, nil
	}
	q, _ := url.ParseQuery(r.URL.RawQuery) // a malformed pair is dropped; a damaged sig then fails below
	if _, ok := q["sig"]; !ok {
		return nil, authFailed("The request has no Authorization header and no shared access signature.")
	}
	t := parseSASToken(q)
	if t.isAccountSAS() {
		return verifyAccountSAS(r, acct, &t, now)
	}
	return verifyServiceSAS(ctx, r, acct, &t, now, lookup)
}

// account finds the account a request addresses, refusing one this
// server does not hold.
func (a *Accounts) account(name string) (*account, error) {
	acct, ok := a.lookup(name)
	if !ok {
		return nil, &Error{Status: http.StatusBadRequest, Code: CodeInvalidOperation, Message: msgInvalidAccount,
			Detail: "The account '" + truncate(name, 64) + "' does not exist."}
	}
	return acct, nil
}
