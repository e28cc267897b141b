package storagexml

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strings"
	"time"
)

// SignedIdentifier is one stored access policy of a table.
type SignedIdentifier struct {
	ID           string
	AccessPolicy AccessPolicy
}

// AccessPolicy is a stored access policy's fields; a zero time or an empty
// permission leaves the field to the SAS that names the policy.
type AccessPolicy struct {
	Start      time.Time
	Expiry     time.Time
	Permission string // letters of "raud"
}

// Limits on stored access policies (set-table-acl).
const (
	MaxSignedIdentifiers = 5
	MaxSignedIDLength    = 64
)

type xmlAccessPolicy struct {
	Start      *string `xml:"Start"`
	Expiry     *string `xml:"Expiry"`
	Permission *string `xml:"Permission"`
}

type xmlSignedIdentifier struct {
	ID           *string          `xml:"Id"`
	AccessPolicy *xmlAccessPolicy `xml:"AccessPolicy"`
}

type xmlSignedIdentifiers struct {
	XMLName     xml.Name              `xml:"SignedIdentifiers"`
	Identifiers []xmlSignedIdentifier `xml:"SignedIdentifier"`
}

// ParseSignedIdentifiers reads a Set Table ACL body. An empty body (or one
// holding only whitespace) sets no policies, removing all of them. At most
// five identifiers, each with a unique, non-empty Id of at most 64
// characters; times in an ISO 8601 UTC form; permissions from r, a, u, d.
// Refusals are 400 InvalidXmlDocument.
func ParseSignedIdentifiers(data []byte) ([]SignedIdentifier, error) {
	if len(bytes.TrimSpace(bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")))) == 0 {
		return nil, nil
	}
	var doc xmlSignedIdentifiers
	if err := decodeRoot(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Identifiers) > MaxSignedIdentifiers {
		return nil, invalidXML(fmt.Sprintf("at most %d signed identifiers are allowed, got %d", MaxSignedIdentifiers, len(doc.Identifiers)))
	}
	out := make([]SignedIdentifier, 0, len(doc.Identifiers))
	seen := map[string]bool{}
	for i, x := range doc.Identifiers {
		path := fmt.Sprintf("SignedIdentifier[%d]", i+1)
		id, err := required(x.ID, path+"/Id")
		if err != nil {
			return nil, err
		}
		if id == "" || len(id) > MaxSignedIDLength {
			return nil, invalidXML(fmt.Sprintf("%s/Id must be 1 to %d characters", path, MaxSignedIDLength))
		}
		if seen[id] {
			return nil, invalidXML(fmt.Sprintf("the signed identifier %q appears twice", truncate(id, 64)))
		}
		seen[id] = true
		si := SignedIdentifier{ID: id}
		if p := x.AccessPolicy; p != nil {
			if si.AccessPolicy.Start, err = optionalTime(p.Start, path+"/AccessPolicy/Start"); err != nil {
				return nil, err
			}
			if si.AccessPolicy.Expiry, err = optionalTime(p.Expiry, path+"/AccessPolicy/Expiry"); err != nil {
				return nil, err
			}
			if p.Permission != nil {
				perm := strings.TrimSpace(*p.Permission)
				if !validPermission(perm) {
					return nil, invalidXML(fmt.Sprintf("%s/AccessPolicy/Permission %q is not a set of r, a, u, d", path, truncate(perm, 16)))
				}
				si.AccessPolicy.Permission = perm
			}
		}
		out = append(out, si)
	}
	return out, nil
}

func validPermission(p string) bool {
	seen := ""
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !strings.ContainsRune("raud", rune(c)) || strings.IndexByte(seen, c) >= 0 {
			return false
		}
		seen += string(c)
	}
	return true
}

// optionalTime parses an ISO 8601 time element; absent or empty is zero.
func optionalTime(v *string, path string) (time.Time, error) {
	if v == nil || strings.TrimSpace(*v) == "" {
		return time.Time{}, nil
	}
	s := strings.TrimSpace(*v)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, invalidXML(fmt.Sprintf("%s %q is not an ISO 8601 UTC time", path, truncate(s, 40)))
}

// ACLTimeFormat is how Get Table ACL writes times: seven fractional digits.
const ACLTimeFormat = "2006-01-02T15:04:05.0000000Z"

// MarshalSignedIdentifiers writes the Get Table ACL body:
//
//	<?xml version="1.0" encoding="utf-8"?><SignedIdentifiers><SignedIdentifier><Id>id</Id><AccessPolicy><Start>2013-11-26T08:49:37.0000000Z</Start><Expiry>...</Expiry><Permission>raud</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>
//
// Fields the policy leaves unset are left out.
func MarshalSignedIdentifiers(ids []SignedIdentifier) []byte {
	var b bytes.Buffer
	b.WriteString(xmlDeclaration)
	if len(ids) == 0 {
		b.WriteString("<SignedIdentifiers />")
		return b.Bytes()
	}
	b.WriteString("<SignedIdentifiers>")
	for _, si := range ids {
		b.WriteString("<SignedIdentifier>")
		elem(&b, "Id", si.ID)
		p := si.AccessPolicy
		if p.Start.IsZero() && p.Expiry.IsZero() && p.Permission == "" {
			b.WriteString("<AccessPolicy />")
		} else {
			b.WriteString("<AccessPolicy>")
			if !p.Start.IsZero() {
				elem(&b, "Start", p.Start.UTC().Format(ACLTimeFormat))
			}
			if !p.Expiry.IsZero() {
				elem(&b, "Expiry", p.Expiry.UTC().Format(ACLTimeFormat))
			}
			if p.Permission != "" {
				elem(&b, "Permission", p.Permission)
			}
			b.WriteString("</AccessPolicy>")
		}
		b.WriteString("</SignedIdentifier>")
	}
	b.WriteString("</SignedIdentifiers>")
	return b.Bytes()
}
