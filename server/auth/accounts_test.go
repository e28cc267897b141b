package auth

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseAccounts(t *testing.T) {
	a, err := ParseAccounts(" acct1:" + devKey + ":" + devKey2 + " ; acct2:" + otherKey + ";")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Names(); !reflect.DeepEqual(got, []string{"acct1", "acct2"}) {
		t.Fatalf("names %v", got)
	}
	if !a.Has("acct1") || a.Has(DevAccountName) {
		t.Fatal("an explicit list must replace the default account")
	}
	acct, _ := a.lookup("acct1")
	if len(acct.keys) != 2 {
		t.Fatalf("acct1 has %d keys, want 2", len(acct.keys))
	}
	d := DefaultAccounts()
	if !d.Has(DevAccountName) || len(d.Names()) != 1 {
		t.Fatalf("default accounts %v", d)
	}
}

// TestParseAccountsLines reads an accounts file's form: one account a
// line, CRLF or LF, blank lines between. Without newlines as separators
// the first two lines would run together into one key, as base64 skips
// newlines.
func TestParseAccountsLines(t *testing.T) {
	a, err := ParseAccounts("acct1:" + devKey + ":" + devKey2 + "\r\n\nacct2:" + otherKey + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Names(); !reflect.DeepEqual(got, []string{"acct1", "acct2"}) {
		t.Fatalf("names %v", got)
	}
	acct, _ := a.lookup("acct1")
	if len(acct.keys) != 2 {
		t.Fatalf("acct1 has %d keys, want 2", len(acct.keys))
	}
	if _, err := ParseAccounts("acct1:" + devKey + "\nacct1:" + otherKey); err == nil {
		t.Error("an account on two lines was accepted")
	}
}

func TestParseAccountsErrors(t *testing.T) {
	secret := "c2VjcmV0c2VjcmV0c2VjcmV0"
	for _, spec := range []string{
		"",
		";;",
		"acct",
		"acct:",
		"acct:not*base64",
		"acct:" + devKey + ":" + devKey2 + ":" + otherKey,
		"acct:" + devKey + ";acct:" + otherKey,
		":" + devKey,
		"bad/name:" + devKey,
		"acct:" + secret + "!", // the bad key must not be echoed
		secret + "=:" + devKey, // nor a key written where the name goes
	} {
		_, err := ParseAccounts(spec)
		if err == nil {
			t.Errorf("ParseAccounts(%q) succeeded", spec)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), devKey) {
			t.Errorf("error for %q leaks a key: %v", spec, err)
		}
	}
}

func TestAccountsNeverPrintKeys(t *testing.T) {
	a := testAccounts(t)
	acct, _ := a.lookup(DevAccountName)
	for _, s := range []string{
		fmt.Sprint(a), fmt.Sprintf("%v %+v %#v %s %q %x", a, a, a, a, a, a),
		fmt.Sprintf("%v %+v %#v", acct, acct, acct), fmt.Sprintf("%v", *a),
	} {
		for _, k := range []string{devKey, devKey2, otherKey, "Eby8", string(acct.keys[0][:8])} {
			if strings.Contains(s, k) {
				t.Fatalf("printed accounts %q contain key material %q", s, k)
			}
		}
	}
}
