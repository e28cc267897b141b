package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/tabuladb/tabula/odata"
)

// Policy is a stored access policy: one signed identifier of Set Table ACL.
// A zero Start or Expiry, or an empty Permission, means the policy leaves
// that field to the SAS.
type Policy struct {
	Start      time.Time
	Expiry     time.Time
	Permission string
}

// PolicyLookup fetches the stored access policy id of table (matched
// case-insensitively, as table names are). found is false when the table has
// no such identifier. It may block on storage, hence the context.
type PolicyLookup func(ctx context.Context, table, id string) (p Policy, found bool, err error)

// SAS versions that change the string to sign.
const (
	sasVersionMin          = "2012-02-12" // first version with table SAS
	sasVersionTableService = "2015-02-21" // canonical resource gains "/table"
	sasVersionIPProtocol   = "2015-04-05" // signedIP, signedProtocol; account SAS
	sasVersionEncScope     = "2020-12-06" // account SAS: signedEncryptionScope
)

// sasToken is the SAS query parameters, URL-decoded. Parameter names are
// the lower-case ones every SDK emits.
type sasToken struct {
	sv, ss, srt, sp, st, se, sip, spr, si, ses, sig string
	tn, spk, srk, epk, erk                          string
}

func parseSASToken(q url.Values) sasToken {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return sasToken{
		sv: get("sv"), ss: get("ss"), srt: get("srt"), sp: get("sp"), st: get("st"), se: get("se"),
		sip: get("sip"), spr: get("spr"), si: get("si"), ses: get("ses"), sig: get("sig"),
		tn: get("tn"), spk: get("spk"), srk: get("srk"), epk: get("epk"), erk: get("erk"),
	}
}

// isAccountSAS tells the two SAS kinds apart: only an account SAS carries
// the signed services and resource types.
func (t *sasToken) isAccountSAS() bool { return t.ss != "" || t.srt != "" }

// decodeSig decodes the signature. A '+' that reached the server unencoded
// has become a space in query decoding; spaces never occur in base64, so
// they are turned back.
func decodeSig(s string) ([]byte, bool) {
	sig, err := base64.StdEncoding.DecodeString(strings.ReplaceAll(s, " ", "+"))
	return sig, err == nil && len(sig) == sha256.Size
}

// serviceSASStringToSign builds the Table service SAS string to sign for the
// token's version (create-service-sas):
//
//	>= 2015-04-05: sp\nst\nse\n/table/{account}/{table}\nsi\nsip\nspr\nsv\nspk\nsrk\nepk\nerk
//	<  2015-04-05: sp\nst\nse\n{canonical}\nsi\nsv\nspk\nsrk\nepk\nerk
//
// where the canonical resource is /table/{account}/{table} from 2015-02-21
// and /{account}/{table} before, the table name lower-cased.
func serviceSASStringToSign(t *sasToken, account string) string {
	table := strings.ToLower(t.tn)
	canonical := "/" + account + "/" + table
	if t.sv >= sasVersionTableService {
		canonical = "/table" + canonical
	}
	fields := []string{t.sp, t.st, t.se, canonical, t.si}
	if t.sv >= sasVersionIPProtocol {
		fields = append(fields, t.sip, t.spr)
	}
	fields = append(fields, t.sv, t.spk, t.srk, t.epk, t.erk)
	return strings.Join(fields, "\n")
}

// accountSASStringToSign builds the account SAS string to sign
// (create-account-sas); from 2020-12-06 it carries the encryption scope:
//
//	account\nsp\nss\nsrt\nst\nse\nsip\nspr\nsv\n[ses\n]
func accountSASStringToSign(t *sasToken, account string) string {
	s := account + "\n" + t.sp + "\n" + t.ss + "\n" + t.srt + "\n" + t.st + "\n" + t.se + "\n" + t.sip + "\n" + t.spr + "\n" + t.sv + "\n"
	if t.sv >= sasVersionEncScope {
		s += t.ses + "\n"
	}
	return s
}

// parseSASTime accepts the ISO 8601 UTC forms the service documents
// (formatting-datetime-values): YYYY-MM-DD, YYYY-MM-DDThh:mmZ,
// YYYY-MM-DDThh:mm:ssZ and YYYY-MM-DDThh:mm:ss.fffffffZ, and numeric offsets.
func parseSASTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("not an ISO 8601 time")
}

// letters is a set of lower-case permission or resource letters.
type letters uint32

func (l letters) has(c byte) bool { return 'a' <= c && c <= 'z' && l&(1<<(c-'a')) != 0 }

// parseLetters reads a permission-style string: each letter from allowed, at
// most once. Order is not enforced: the signature covers the string as sent,
// and the SDKs all emit the documented order anyway.
func parseLetters(s, allowed string) (letters, bool) {
	var l letters
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(allowed, c) < 0 || l.has(c) {
			return 0, false
		}
		l |= 1 << (c - 'a')
	}
	return l, true
}

// Letter sets of the SAS fields (create-service-sas, create-account-sas).
const (
	tablePermissions   = "raud"
	accountPermissions = "rwdylacuptfix" // every service's letters; only some mean anything to tables
	accountServices    = "bqtf"
	accountResources   = "sco"
)

// checkTimes refuses a SAS outside [st, se).
func checkTimes(st, se string, now time.Time) *Error {
	var start time.Time
	if st != "" {
		t, err := parseSASTime(st)
		if err != nil {
			return authFailed("The signed start time (st) '" + truncate(st, 40) + "' is not an ISO 8601 UTC time.")
		}
		start = t
	}
	end, err := parseSASTime(se)
	if err != nil {
		return authFailed("The signed expiry time (se) '" + truncate(se, 40) + "' is not an ISO 8601 UTC time.")
	}
	if !start.IsZero() && !end.After(start) {
		return authFailed("Signed expiry time [" + se + "] must be after signed start time [" + st + "]")
	}
	if (!start.IsZero() && now.Before(start)) || !now.Before(end) {
		return authFailed(fmt.Sprintf("Signature not valid in the specified time frame: Start [%s] - Expiry [%s] - Current [%s]",
			st, se, now.UTC().Format(http.TimeFormat)))
	}
	return nil
}

// checkProtocol enforces spr. The emulator serves http, so "https" alone
// refuses every plain-http request.
func checkProtocol(spr string, r *http.Request) *Error {
	switch spr {
	case "", "https,http", "http,https":
		return nil
	case "https":
		if r.TLS == nil {
			return forbidden(CodeAuthorizationProtocolMismatch, msgProtocolMismatch, "The SAS allows https only; the request used http.")
		}
		return nil
	}
	return authFailed("The signed protocol (spr) must be 'https' or 'https,http'.")
}

// checkIP enforces sip: one address or an inclusive range "a-b".
func checkIP(sip string, r *http.Request) *Error {
	if sip == "" {
		return nil
	}
	lo, hi, ok := strings.Cut(sip, "-")
	start, err := netip.ParseAddr(lo)
	end := start
	if err == nil && ok {
		end, err = netip.ParseAddr(hi)
	}
	if err != nil || start.Is4() != end.Is4() || end.Less(start) {
		return authFailed("The signed IP (sip) '" + truncate(sip, 64) + "' is not an address or an address range.")
	}
	remote := remoteAddr(r)
	if !remote.IsValid() || remote.Is4() != start.Is4() || remote.Less(start) || end.Less(remote) {
		shown := "unknown"
		if remote.IsValid() {
			shown = remote.String()
		}
		return forbidden(CodeAuthorizationSourceIPMismatch, msgSourceIPMismatch+shown+".", "The request's address is outside the SAS's signed IP range.")
	}
	return nil
}

func remoteAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}

// verifyServiceSAS checks a table service SAS and returns its principal.
func verifyServiceSAS(ctx context.Context, r *http.Request, acct *account, t *sasToken, now time.Time, lookup PolicyLookup) (*Principal, error) {
	if t.sv == "" || t.sv < sasVersionMin {
		return nil, authFailed("The signed version (sv) is missing or older than " + sasVersionMin + ".")
	}
	if t.tn == "" {
		return nil, authFailed("A table SAS must name its table (tn).")
	}
	sig, ok := decodeSig(t.sig)
	if !ok {
		return nil, authFailed("The signature (sig) is not a base64 HMAC-SHA256.")
	}
	sts := serviceSASStringToSign(t, acct.name)
	if !acct.matchesAnyKey(sig, sts) {
		return nil, authFailed("Signature did not match. String to sign used was " + sts)
	}

	sp, st, se := t.sp, t.st, t.se
	if t.si != "" {
		if len(t.si) > 64 {
			return nil, authFailed("The signed identifier (si) is longer than 64 characters.")
		}
		if lookup == nil {
			return nil, authFailed("Signed identifier '" + t.si + "' not found.")
		}
		p, found, err := lookup(ctx, t.tn, t.si)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, authFailed("Signed identifier '" + truncate(t.si, 64) + "' not found.")
		}
		// A field may come from the SAS or from the policy, never both
		// (define-stored-access-policy).
		if p.Permission != "" {
			if sp != "" {
				return nil, authFailed("The signed permissions are specified in both the SAS and the stored access policy.")
			}
			sp = p.Permission
		}
		if !p.Start.IsZero() {
			if st != "" {
				return nil, authFailed("The signed start time is specified in both the SAS and the stored access policy.")
			}
			st = p.Start.UTC().Format(time.RFC3339Nano)
		}
		if !p.Expiry.IsZero() {
			if se != "" {
				return nil, authFailed("The signed expiry time is specified in both the SAS and the stored access policy.")
			}
			se = p.Expiry.UTC().Format(time.RFC3339Nano)
		}
	}
	if sp == "" || se == "" {
		return nil, authFailed("The SAS and its stored access policy together must give the signed permissions (sp) and expiry (se).")
	}
	perms, ok := parseLetters(sp, tablePermissions)
	if !ok {
		return nil, authFailed("The signed permissions '" + truncate(sp, 16) + "' are not a set of r, a, u, d.")
	}
	if e := checkTimes(st, se, now); e != nil {
		return nil, e
	}
	if e := checkIP(t.sip, r); e != nil {
		return nil, e
	}
	if e := checkProtocol(t.spr, r); e != nil {
		return nil, e
	}
	kr, e := sasKeyRange(t)
	if e != nil {
		return nil, e
	}
	return &Principal{
		Account: acct.name, Kind: KindServiceSAS, Version: t.sv,
		table: strings.ToLower(t.tn), perms: perms, keyRange: kr, hasRange: kr != odata.FullRange,
	}, nil
}

// sasKeyRange turns spk/srk/epk/erk into a key range (create-service-sas,
// "Specifying table access ranges"), bounds inclusive:
//
//	spk      -> PartitionKey >= spk
//	spk, srk -> PartitionKey > spk || (PartitionKey == spk && RowKey >= srk)
//	epk      -> PartitionKey <= epk
//	epk, erk -> PartitionKey < epk || (PartitionKey == epk && RowKey <= erk)
func sasKeyRange(t *sasToken) (odata.KeyRange, *Error) {
	if (t.srk != "" && t.spk == "") || (t.erk != "" && t.epk == "") {
		return odata.KeyRange{}, authFailed("A starting or ending row key (srk, erk) needs its partition key (spk, epk).")
	}
	var kr odata.KeyRange
	if t.spk != "" {
		// RowKey "" is the smallest, so BeforeKey(spk, "") opens the whole partition.
		kr.Start = odata.Position{Kind: odata.BeforeKey, PartitionKey: t.spk, RowKey: t.srk}
	}
	if t.epk != "" {
		if t.erk != "" {
			kr.End = odata.Position{Kind: odata.AfterKey, PartitionKey: t.epk, RowKey: t.erk}
		} else {
			kr.End = odata.Position{Kind: odata.AfterPartition, PartitionKey: t.epk}
		}
	}
	return kr, nil
}

// verifyAccountSAS checks an account SAS and returns its principal. Whether
// its services, resource types and permissions fit an operation is decided
// later, by CanDo.
func verifyAccountSAS(r *http.Request, acct *account, t *sasToken, now time.Time) (*Principal, error) {
	if t.sv == "" || t.sv < sasVersionIPProtocol {
		return nil, authFailed("The signed version (sv) of an account SAS is missing or older than " + sasVersionIPProtocol + ".")
	}
	if t.ss == "" || t.srt == "" || t.sp == "" || t.se == "" {
		return nil, authFailed("An account SAS needs ss, srt, sp and se.")
	}
	if t.si != "" {
		return nil, authFailed("Stored access policies are not supported for an account SAS.")
	}
	sig, ok := decodeSig(t.sig)
	if !ok {
		return nil, authFailed("The signature (sig) is not a base64 HMAC-SHA256.")
	}
	sts := accountSASStringToSign(t, acct.name)
	if !acct.matchesAnyKey(sig, sts) {
		return nil, authFailed("Signature did not match. String to sign used was " + sts)
	}
	services, ok1 := parseLetters(t.ss, accountServices)
	resources, ok2 := parseLetters(t.srt, accountResources)
	perms, ok3 := parseLetters(t.sp, accountPermissions)
	if !ok1 || !ok2 || !ok3 {
		return nil, authFailed("The signed services (ss), resource types (srt) or permissions (sp) hold an unknown or repeated letter.")
	}
	if e := checkTimes(t.st, t.se, now); e != nil {
		return nil, e
	}
	if e := checkIP(t.sip, r); e != nil {
		return nil, e
	}
	if e := checkProtocol(t.spr, r); e != nil {
		return nil, e
	}
	return &Principal{
		Account: acct.name, Kind: KindAccountSAS, Version: t.sv,
		services: services, resources: resources, perms: perms,
	}, nil
}
