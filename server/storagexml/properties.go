package storagexml

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strconv"
	"strings"
)

// ServiceProperties are the Table service properties of an account.
type ServiceProperties struct {
	Logging       Logging
	HourMetrics   Metrics
	MinuteMetrics Metrics
	Cors          []CorsRule // evaluated in order; empty means CORS is off
}

// Logging is the Storage Analytics logging setting (stored and returned;
// Tabula writes no analytics logs).
type Logging struct {
	Version         string
	Delete          bool
	Read            bool
	Write           bool
	RetentionPolicy RetentionPolicy
}

// Metrics is an hour or minute metrics setting (stored and returned).
type Metrics struct {
	Version         string
	Enabled         bool
	IncludeAPIs     bool // meaningful only when Enabled
	RetentionPolicy RetentionPolicy
}

// RetentionPolicy says how long analytics data is kept: Days is 1..365 when
// Enabled and 0 otherwise.
type RetentionPolicy struct {
	Enabled bool
	Days    int
}

// CorsRule is one CORS rule. The list fields keep the text the client set
// (comma-separated), as the service returns it; the methods split it.
type CorsRule struct {
	AllowedOrigins  string // origins, or "*"
	AllowedMethods  string
	AllowedHeaders  string // names, or prefixes ending in '*'
	ExposedHeaders  string
	MaxAgeInSeconds int
}

// ServicePropertiesUpdate is the body of Set Table Service Properties. Since
// version 2013-08-15 each root element is optional, and an omitted one keeps
// its current value (set-table-service-properties); a present one replaces
// it whole. A present Cors element with no rules deletes every rule.
type ServicePropertiesUpdate struct {
	Logging       *Logging
	HourMetrics   *Metrics
	MinuteMetrics *Metrics
	Cors          []CorsRule
	CorsSet       bool // the Cors element was present
}

// AnalyticsVersion is the only Storage Analytics version.
const AnalyticsVersion = "1.0"

// DefaultServiceProperties are the properties of an account that never set
// them: analytics off, no CORS rules.
func DefaultServiceProperties() ServiceProperties {
	return ServiceProperties{
		Logging:       Logging{Version: AnalyticsVersion},
		HourMetrics:   Metrics{Version: AnalyticsVersion},
		MinuteMetrics: Metrics{Version: AnalyticsVersion},
	}
}

// Merge applies a Set Table Service Properties update: present elements
// replace, absent ones keep p's values.
func (p ServiceProperties) Merge(u ServicePropertiesUpdate) ServiceProperties {
	out := p
	if u.Logging != nil {
		out.Logging = *u.Logging
	}
	if u.HourMetrics != nil {
		out.HourMetrics = *u.HourMetrics
	}
	if u.MinuteMetrics != nil {
		out.MinuteMetrics = *u.MinuteMetrics
	}
	if u.CorsSet {
		out.Cors = append([]CorsRule(nil), u.Cors...)
	}
	return out
}

// The documents as encoding/xml sees them: pointers tell an absent element
// from an empty one. Element order is free, as the SDKs differ in it.
type xmlRetention struct {
	Enabled *string `xml:"Enabled"`
	Days    *string `xml:"Days"`
}

type xmlLogging struct {
	Version         *string       `xml:"Version"`
	Delete          *string       `xml:"Delete"`
	Read            *string       `xml:"Read"`
	Write           *string       `xml:"Write"`
	RetentionPolicy *xmlRetention `xml:"RetentionPolicy"`
}

type xmlMetrics struct {
	Version         *string       `xml:"Version"`
	Enabled         *string       `xml:"Enabled"`
	IncludeAPIs     *string       `xml:"IncludeAPIs"`
	RetentionPolicy *xmlRetention `xml:"RetentionPolicy"`
}

type xmlCorsRule struct {
	AllowedOrigins  *string `xml:"AllowedOrigins"`
	AllowedMethods  *string `xml:"AllowedMethods"`
	MaxAgeInSeconds *string `xml:"MaxAgeInSeconds"`
	ExposedHeaders  *string `xml:"ExposedHeaders"`
	AllowedHeaders  *string `xml:"AllowedHeaders"`
}

type xmlCors struct {
	Rules []xmlCorsRule `xml:"CorsRule"`
}

type xmlServiceProperties struct {
	XMLName       xml.Name    `xml:"StorageServiceProperties"`
	Logging       *xmlLogging `xml:"Logging"`
	HourMetrics   *xmlMetrics `xml:"HourMetrics"`
	MinuteMetrics *xmlMetrics `xml:"MinuteMetrics"`
	Cors          *xmlCors    `xml:"Cors"`
}

// ParseServiceProperties reads and validates a Set Table Service Properties
// body. Every refusal is 400 InvalidXmlDocument (413 past
// MaxDocumentBytes) with the reason in Detail. Within a present root
// element every child is required, except IncludeAPIs when metrics are
// disabled and Days when retention is disabled; retention is 1 to 365 days;
// CORS rules follow the limits of set-table-service-properties.
func ParseServiceProperties(data []byte) (ServicePropertiesUpdate, error) {
	var doc xmlServiceProperties
	var u ServicePropertiesUpdate
	if err := decodeRoot(data, &doc); err != nil {
		return u, err
	}
	var err error
	if doc.Logging != nil {
		if u.Logging, err = doc.Logging.validate(); err != nil {
			return ServicePropertiesUpdate{}, err
		}
	}
	if doc.HourMetrics != nil {
		if u.HourMetrics, err = doc.HourMetrics.validate("HourMetrics"); err != nil {
			return ServicePropertiesUpdate{}, err
		}
	}
	if doc.MinuteMetrics != nil {
		if u.MinuteMetrics, err = doc.MinuteMetrics.validate("MinuteMetrics"); err != nil {
			return ServicePropertiesUpdate{}, err
		}
	}
	if doc.Cors != nil {
		u.CorsSet = true
		if u.Cors, err = doc.Cors.validate(); err != nil {
			return ServicePropertiesUpdate{}, err
		}
	}
	return u, nil
}

func required(v *string, path string) (string, error) {
	if v == nil {
		return "", invalidXML("the element " + path + " is missing")
	}
	return strings.TrimSpace(*v), nil
}

func parseBool(v *string, path string) (bool, error) {
	s, err := required(v, path)
	if err != nil {
		return false, err
	}
	switch strings.ToLower(s) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, invalidXML(fmt.Sprintf("%s must be true or false, not %q", path, truncate(s, 40)))
}

func (r *xmlRetention) validate(path string) (RetentionPolicy, error) {
	if r == nil {
		return RetentionPolicy{}, invalidXML("the element " + path + "/RetentionPolicy is missing")
	}
	path += "/RetentionPolicy"
	enabled, err := parseBool(r.Enabled, path+"/Enabled")
	if err != nil {
		return RetentionPolicy{}, err
	}
	if !enabled {
		return RetentionPolicy{}, nil // Days is ignored when retention is off
	}
	s, err := required(r.Days, path+"/Days")
	if err != nil {
		return RetentionPolicy{}, err
	}
	days, err := strconv.Atoi(s)
	if err != nil || days < 1 || days > 365 {
		return RetentionPolicy{}, invalidXML(fmt.Sprintf("%s/Days must be a whole number from 1 to 365, not %q", path, truncate(s, 40)))
	}
	return RetentionPolicy{Enabled: true, Days: days}, nil
}

func validVersion(v *string, path string) (string, error) {
	s, err := required(v, path)
	if err != nil {
		return "", err
	}
	if s == "" || len(s) > 16 {
		return "", invalidXML(path + " must be an analytics version such as 1.0")
	}
	return s, nil
}

func (l *xmlLogging) validate() (*Logging, error) {
	var out Logging
	var err error
	if out.Version, err = validVersion(l.Version, "Logging/Version"); err != nil {
		return nil, err
	}
	if out.Delete, err = parseBool(l.Delete, "Logging/Delete"); err != nil {
		return nil, err
	}
	if out.Read, err = parseBool(l.Read, "Logging/Read"); err != nil {
		return nil, err
	}
	if out.Write, err = parseBool(l.Write, "Logging/Write"); err != nil {
		return nil, err
	}
	if out.RetentionPolicy, err = l.RetentionPolicy.validate("Logging"); err != nil {
		return nil, err
	}
	return &out, nil
}

func (m *xmlMetrics) validate(name string) (*Metrics, error) {
	var out Metrics
	var err error
	if out.Version, err = validVersion(m.Version, name+"/Version"); err != nil {
		return nil, err
	}
	if out.Enabled, err = parseBool(m.Enabled, name+"/Enabled"); err != nil {
		return nil, err
	}
	if out.Enabled {
		if out.IncludeAPIs, err = parseBool(m.IncludeAPIs, name+"/IncludeAPIs"); err != nil {
			return nil, err
		}
	}
	if out.RetentionPolicy, err = m.RetentionPolicy.validate(name); err != nil {
		return nil, err
	}
	return &out, nil
}

// CORS limits (set-table-service-properties, Remarks).
const (
	MaxCorsRules          = 5
	maxCorsValueBytes     = 2048 // all rule values together, tags excluded
	maxCorsItemLen        = 256  // one origin or header
	maxCorsOrigins        = 64
	maxCorsLiteralHeaders = 64
	maxCorsPrefixHeaders  = 2
)

// corsMethods are the methods AllowedMethods may list.
var corsMethods = [...]string{"DELETE", "GET", "HEAD", "MERGE", "POST", "OPTIONS", "PUT", "PATCH"}

func (c *xmlCors) validate() ([]CorsRule, error) {
	if len(c.Rules) > MaxCorsRules {
		return nil, invalidXML(fmt.Sprintf("at most %d CORS rules are allowed, got %d", MaxCorsRules, len(c.Rules)))
	}
	rules := make([]CorsRule, 0, len(c.Rules))
	total := 0
	for i, x := range c.Rules {
		path := fmt.Sprintf("Cors/CorsRule[%d]", i+1)
		var r CorsRule
		var err error
		var maxAge string
		if r.AllowedOrigins, err = required(x.AllowedOrigins, path+"/AllowedOrigins"); err != nil {
			return nil, err
		}
		if r.AllowedMethods, err = required(x.AllowedMethods, path+"/AllowedMethods"); err != nil {
			return nil, err
		}
		if maxAge, err = required(x.MaxAgeInSeconds, path+"/MaxAgeInSeconds"); err != nil {
			return nil, err
		}
		if r.ExposedHeaders, err = required(x.ExposedHeaders, path+"/ExposedHeaders"); err != nil {
			return nil, err
		}
		if r.AllowedHeaders, err = required(x.AllowedHeaders, path+"/AllowedHeaders"); err != nil {
			return nil, err
		}
		total += len(r.AllowedOrigins) + len(r.AllowedMethods) + len(maxAge) + len(r.ExposedHeaders) + len(r.AllowedHeaders)
		n, err := strconv.ParseInt(maxAge, 10, 32)
		if err != nil || n < 0 {
			return nil, invalidXML(fmt.Sprintf("%s/MaxAgeInSeconds must be a whole number of seconds, not %q", path, truncate(maxAge, 40)))
		}
		r.MaxAgeInSeconds = int(n)
		if err := checkOrigins(r.AllowedOrigins, path); err != nil {
			return nil, err
		}
		if err := checkMethods(r.AllowedMethods, path); err != nil {
			return nil, err
		}
		if err := checkHeaders(r.AllowedHeaders, path+"/AllowedHeaders"); err != nil {
			return nil, err
		}
		if err := checkHeaders(r.ExposedHeaders, path+"/ExposedHeaders"); err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	if total > maxCorsValueBytes {
		return nil, invalidXML(fmt.Sprintf("the CORS rules' values exceed %d characters", maxCorsValueBytes))
	}
	return rules, nil
}

// splitList splits a comma-separated list, trimming each item; an empty
// list gives no items, an empty item is reported as "".
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	items := strings.Split(s, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}

func checkOrigins(s, path string) error {
	items := splitList(s)
	if len(items) == 0 {
		return invalidXML(path + "/AllowedOrigins must list origins or be *")
	}
	if len(items) > maxCorsOrigins {
		return invalidXML(fmt.Sprintf("%s/AllowedOrigins lists more than %d origins", path, maxCorsOrigins))
	}
	for _, o := range items {
		if o == "" || len(o) > maxCorsItemLen {
			return invalidXML(fmt.Sprintf("%s/AllowedOrigins has an empty origin or one longer than %d characters", path, maxCorsItemLen))
		}
	}
	return nil
}

func checkMethods(s, path string) error {
	items := splitList(s)
	if len(items) == 0 {
		return invalidXML(path + "/AllowedMethods must list at least one method")
	}
	for _, m := range items {
		ok := false
		for _, known := range corsMethods {
			if strings.EqualFold(m, known) {
				ok = true
			}
		}
		if !ok {
			return invalidXML(fmt.Sprintf("%s/AllowedMethods: %q is not one of DELETE, GET, HEAD, MERGE, POST, OPTIONS, PUT, PATCH", path, truncate(m, 40)))
		}
	}
	return nil
}

func checkHeaders(s, path string) error {
	literal, prefixed := 0, 0
	for _, h := range splitList(s) {
		if h == "" || len(h) > maxCorsItemLen {
			return invalidXML(fmt.Sprintf("%s has an empty header or one longer than %d characters", path, maxCorsItemLen))
		}
		if strings.HasSuffix(h, "*") {
			prefixed++
		} else {
			literal++
		}
	}
	if literal > maxCorsLiteralHeaders || prefixed > maxCorsPrefixHeaders {
		return invalidXML(fmt.Sprintf("%s allows at most %d headers and %d prefixes", path, maxCorsLiteralHeaders, maxCorsPrefixHeaders))
	}
	return nil
}

// MarshalServiceProperties writes p as Get Table Service Properties returns
// it, in the service's element order:
//
//	<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Logging><Version>1.0</Version><Read>false</Read>...
//
// IncludeAPIs is left out of disabled metrics and Days out of disabled
// retention, as the service does.
func MarshalServiceProperties(p ServiceProperties) []byte {
	var b bytes.Buffer
	b.WriteString(xmlDeclaration)
	b.WriteString("<StorageServiceProperties>")
	b.WriteString("<Logging>")
	elem(&b, "Version", p.Logging.Version)
	elem(&b, "Read", strconv.FormatBool(p.Logging.Read))
	elem(&b, "Write", strconv.FormatBool(p.Logging.Write))
	elem(&b, "Delete", strconv.FormatBool(p.Logging.Delete))
	writeRetention(&b, p.Logging.RetentionPolicy)
	b.WriteString("</Logging>")
	writeMetrics(&b, "HourMetrics", p.HourMetrics)
	writeMetrics(&b, "MinuteMetrics", p.MinuteMetrics)
	if len(p.Cors) == 0 {
		b.WriteString("<Cors />")
	} else {
		b.WriteString("<Cors>")
		for _, r := range p.Cors {
			b.WriteString("<CorsRule>")
			elem(&b, "AllowedMethods", r.AllowedMethods)
			elem(&b, "AllowedOrigins", r.AllowedOrigins)
			elem(&b, "AllowedHeaders", r.AllowedHeaders)
			elem(&b, "ExposedHeaders", r.ExposedHeaders)
			elem(&b, "MaxAgeInSeconds", strconv.Itoa(r.MaxAgeInSeconds))
			b.WriteString("</CorsRule>")
		}
		b.WriteString("</Cors>")
	}
	b.WriteString("</StorageServiceProperties>")
	return b.Bytes()
}

func writeMetrics(b *bytes.Buffer, name string, m Metrics) {
	b.WriteString("<" + name + ">")
	elem(b, "Version", m.Version)
	elem(b, "Enabled", strconv.FormatBool(m.Enabled))
	if m.Enabled {
		elem(b, "IncludeAPIs", strconv.FormatBool(m.IncludeAPIs))
	}
	writeRetention(b, m.RetentionPolicy)
	b.WriteString("</" + name + ">")
}

func writeRetention(b *bytes.Buffer, r RetentionPolicy) {
	b.WriteString("<RetentionPolicy>")
	elem(b, "Enabled", strconv.FormatBool(r.Enabled))
	if r.Enabled {
		elem(b, "Days", strconv.Itoa(r.Days))
	}
	b.WriteString("</RetentionPolicy>")
}

// elem writes <name>value</name>, or <name /> for an empty value.
func elem(b *bytes.Buffer, name, value string) {
	if value == "" {
		b.WriteString("<" + name + " />")
		return
	}
	b.WriteString("<" + name + ">")
	escape(b, value)
	b.WriteString("</" + name + ">")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
