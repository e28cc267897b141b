package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// The emulator's well-known development account, which Azure SDK connection
// strings such as UseDevelopmentStorage=true expect.
const (
	DevAccountName = "devstoreaccount1"
	DevAccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// maxKeysPerAccount is the storage service's key count: key1 and key2, so a
// key can be rotated while the other keeps signing.
const maxKeysPerAccount = 2

// Accounts is an immutable set of storage accounts and their keys. It is
// safe for concurrent use. Its String and GoString methods list account
// names only, so printing it never leaks a key.
type Accounts struct {
	byName map[string]*account
}

type account struct {
	name string
	keys [][]byte // decoded key1[, key2]
	// macs holds, per key, HMAC-SHA256 states keyed with
	// it: keying one costs two hash blocks and several allocations, paid
	// once per state rather than once per request.
	macs []*sync.Pool
}

// addKey adds a decoded key.
func (a *account) addKey(key []byte) {
	a.keys = append(a.keys, key)
	a.macs = append(a.macs, &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }})
}

// DefaultAccounts returns the emulator's default: devstoreaccount1 with its
// well-known key.
func DefaultAccounts() *Accounts {
	a, err := ParseAccounts(DevAccountName + ":" + DevAccountKey)
	if err != nil {
		panic("auth: the development account does not parse: " + err.Error())
	}
	return a
}

// ParseAccounts reads the emulator's AZURITE_ACCOUNTS format,
// "name1:key1[:key2];name2:key1", with base64 keys. A newline separates
// entries as ";" does, so a file may hold one account a line. Whitespace
// around entries and a trailing ";" are allowed. Like the emulator, an
// explicit list replaces the default account rather than adding to it.
func ParseAccounts(spec string) (*Accounts, error) {
	a := &Accounts{byName: make(map[string]*account)}
	// A newline must end an entry rather than fall inside a key: the
	// base64 decoder skips newlines, so "a:k1\nb:k2" would otherwise read
	// as one account, a, with the keys "k1b" and "k2".
	for i, entry := range strings.Split(strings.ReplaceAll(spec, "\n", ";"), ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		fields := strings.Split(entry, ":")
		name := strings.TrimSpace(fields[0])
		if err := validAccountName(name); err != nil {
			return nil, fmt.Errorf("auth: account entry %d: %v", i+1, err)
		}
		if len(fields) < 2 || len(fields) > 1+maxKeysPerAccount {
			return nil, fmt.Errorf("auth: account %q: want name:key1[:key2], got %d key fields", name, len(fields)-1)
		}
		if _, dup := a.byName[name]; dup {
			return nil, fmt.Errorf("auth: account %q is listed twice", name)
		}
		acct := &account{name: name}
		for k, enc := range fields[1:] {
			// The message names the key by position only: its text is a secret.
			key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
			if err != nil || len(key) == 0 {
				return nil, fmt.Errorf("auth: account %q: key%d is not valid non-empty base64", name, k+1)
			}
			acct.addKey(key)
		}
		a.byName[name] = acct
	}
	if len(a.byName) == 0 {
		return nil, fmt.Errorf("auth: no accounts in the account list")
	}
	return a, nil
}

// validAccountName accepts what storage account names may hold (lowercase
// letters and digits) plus upper case and '-', which the emulator tolerates;
// ':', ';', '/' and whitespace would break the list format or the URL.
func validAccountName(name string) error {
	if name == "" {
		return fmt.Errorf("empty account name")
	}
	if len(name) > 64 {
		return fmt.Errorf("account name longer than 64 characters")
	}
	for i, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			// The name is not quoted: one that is not a name may be a key
			// in the wrong place (base64 holds '+', '/' and '='), and this
			// message reaches logs.
			return fmt.Errorf("the account name holds %q at byte %d; use letters, digits and '-'", c, i+1)
		}
	}
	return nil
}

// Has reports whether the account exists.
func (a *Accounts) Has(name string) bool {
	_, ok := a.byName[name]
	return ok
}

// Names lists the account names in sorted order.
func (a *Accounts) Names() []string {
	names := make([]string, 0, len(a.byName))
	for n := range a.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// String lists the account names; keys are never shown.
func (a *Accounts) String() string { return "Accounts" + fmt.Sprint(a.Names()) }

// GoString is String, so %#v cannot print the keys either.
func (a *Accounts) GoString() string { return a.String() }

func (a *Accounts) lookup(name string) (*account, bool) {
	acct, ok := a.byName[name]
	return acct, ok
}

// String names the account; keys are never shown.
func (a *account) String() string { return "account(" + a.name + ")" }

// GoString is String, so %#v cannot print the keys either.
func (a *account) GoString() string { return a.String() }
