package storagexml

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// docSample is the request body of set-table-service-properties' sample.
const docSample = `<?xml version="1.0" encoding="utf-8"?>
<StorageServiceProperties>
    <Logging>
        <Version>1.0</Version>
        <Delete>true</Delete>
        <Read>false</Read>
        <Write>true</Write>
        <RetentionPolicy>
            <Enabled>true</Enabled>
            <Days>7</Days>
        </RetentionPolicy>
    </Logging>
    <HourMetrics>
        <Version>1.0</Version>
        <Enabled>true</Enabled>
        <IncludeAPIs>false</IncludeAPIs>
        <RetentionPolicy>
            <Enabled>true</Enabled>
            <Days>7</Days>
        </RetentionPolicy>
    </HourMetrics>
    <MinuteMetrics>
        <Version>1.0</Version>
        <Enabled>true</Enabled>
        <IncludeAPIs>true</IncludeAPIs>
        <RetentionPolicy>
            <Enabled>true</Enabled>
            <Days>7</Days>
        </RetentionPolicy>
    </MinuteMetrics>
    <Cors>
        <CorsRule>
            <AllowedOrigins> http://www.fabrikam.com,http://www.contoso.com</AllowedOrigins>
            <AllowedMethods>GET,PUT</AllowedMethods>
            <MaxAgeInSeconds>500</MaxAgeInSeconds>
            <ExposedHeaders>x-ms-meta-data*,x-ms-meta-customheader</ExposedHeaders>
            <AllowedHeaders>x-ms-meta-target*,x-ms-meta-customheader</AllowedHeaders>
        </CorsRule>
    </Cors>
</StorageServiceProperties>
`

func docSampleProps() ServiceProperties {
	return ServiceProperties{
		Logging:       Logging{Version: "1.0", Delete: true, Write: true, RetentionPolicy: RetentionPolicy{Enabled: true, Days: 7}},
		HourMetrics:   Metrics{Version: "1.0", Enabled: true, RetentionPolicy: RetentionPolicy{Enabled: true, Days: 7}},
		MinuteMetrics: Metrics{Version: "1.0", Enabled: true, IncludeAPIs: true, RetentionPolicy: RetentionPolicy{Enabled: true, Days: 7}},
		Cors: []CorsRule{{AllowedOrigins: "http://www.fabrikam.com,http://www.contoso.com", AllowedMethods: "GET,PUT", MaxAgeInSeconds: 500,
			ExposedHeaders: "x-ms-meta-data*,x-ms-meta-customheader", AllowedHeaders: "x-ms-meta-target*,x-ms-meta-customheader"}},
	}
}

func TestParseServicePropertiesDocSample(t *testing.T) {
	u, err := ParseServiceProperties([]byte(docSample))
	if err != nil {
		t.Fatal(err)
	}
	if !u.CorsSet || u.Logging == nil || u.HourMetrics == nil || u.MinuteMetrics == nil {
		t.Fatalf("update %+v", u)
	}
	got := DefaultServiceProperties().Merge(u)
	if !reflect.DeepEqual(got, docSampleProps()) {
		t.Fatalf("got %+v\nwant %+v", got, docSampleProps())
	}
}

// goldenProps is what the service returned in an aztables recording
// (TestGetProperties), minus the byte-order mark.
const goldenProps = `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Logging><Version>1.0</Version><Read>true</Read><Write>true</Write><Delete>true</Delete><RetentionPolicy><Enabled>true</Enabled><Days>5</Days></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>5</Days></RetentionPolicy></HourMetrics><MinuteMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>5</Days></RetentionPolicy></MinuteMetrics><Cors><CorsRule><AllowedMethods>PUT</AllowedMethods><AllowedOrigins>www.xyz.com</AllowedOrigins><AllowedHeaders>x-ms-meta-data*</AllowedHeaders><ExposedHeaders>x-ms-meta-source*</ExposedHeaders><MaxAgeInSeconds>500</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>`

func TestMarshalServicePropertiesGolden(t *testing.T) {
	r := RetentionPolicy{Enabled: true, Days: 5}
	p := ServiceProperties{
		Logging:       Logging{Version: "1.0", Read: true, Write: true, Delete: true, RetentionPolicy: r},
		HourMetrics:   Metrics{Version: "1.0", Enabled: true, IncludeAPIs: true, RetentionPolicy: r},
		MinuteMetrics: Metrics{Version: "1.0", Enabled: true, IncludeAPIs: true, RetentionPolicy: r},
		Cors: []CorsRule{{AllowedMethods: "PUT", AllowedOrigins: "www.xyz.com", AllowedHeaders: "x-ms-meta-data*",
			ExposedHeaders: "x-ms-meta-source*", MaxAgeInSeconds: 500}},
	}
	if got := string(MarshalServiceProperties(p)); got != goldenProps {
		t.Fatalf("got  %s\nwant %s", got, goldenProps)
	}
	// The service's own bytes (with its BOM) parse back to the same value.
	u, err := ParseServiceProperties([]byte("\ufeff" + goldenProps))
	if err != nil {
		t.Fatal(err)
	}
	if got := DefaultServiceProperties().Merge(u); !reflect.DeepEqual(got, p) {
		t.Fatalf("round trip %+v", got)
	}
}

func TestDefaultServiceProperties(t *testing.T) {
	want := `<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties><Logging><Version>1.0</Version><Read>false</Read><Write>false</Write><Delete>false</Delete><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics><MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics><Cors /></StorageServiceProperties>`
	b := MarshalServiceProperties(DefaultServiceProperties())
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	u, err := ParseServiceProperties(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := DefaultServiceProperties().Merge(u); !reflect.DeepEqual(got, DefaultServiceProperties()) {
		t.Fatalf("round trip %+v", got)
	}
}

func TestServicePropertiesRoundTrip(t *testing.T) {
	for _, p := range []ServiceProperties{
		DefaultServiceProperties(),
		docSampleProps(),
		{Logging: Logging{Version: "1.0", Read: true}, HourMetrics: Metrics{Version: "1.0", Enabled: true, RetentionPolicy: RetentionPolicy{Enabled: true, Days: 365}},
			MinuteMetrics: Metrics{Version: "1.0"}, Cors: []CorsRule{
				{AllowedOrigins: "*", AllowedMethods: "GET", MaxAgeInSeconds: 0},
				{AllowedOrigins: "http://a&b<c>", AllowedMethods: "DELETE,GET,HEAD,MERGE,POST,OPTIONS,PUT,PATCH", AllowedHeaders: "x-a", ExposedHeaders: "x-b*", MaxAgeInSeconds: 2147483647},
			}},
	} {
		u, err := ParseServiceProperties(MarshalServiceProperties(p))
		if err != nil {
			t.Fatal(err)
		}
		if got := DefaultServiceProperties().Merge(u); !reflect.DeepEqual(got, p) {
			t.Fatalf("got %+v\nwant %+v", got, p)
		}
	}
}

// TestServicePropertiesMerge: omitted root elements keep their values, a
// present Cors with no rules removes them all.
func TestServicePropertiesMerge(t *testing.T) {
	cur := docSampleProps()
	// aztables' request body for a minute-metrics-only update: no
	// declaration, Version last.
	u, err := ParseServiceProperties([]byte(`<StorageServiceProperties><MinuteMetrics><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy><Version>1.0</Version></MinuteMetrics></StorageServiceProperties>`))
	if err != nil {
		t.Fatal(err)
	}
	got := cur.Merge(u)
	want := docSampleProps()
	want.MinuteMetrics = Metrics{Version: "1.0"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v", got)
	}
	u, err = ParseServiceProperties([]byte(`<StorageServiceProperties><Cors/></StorageServiceProperties>`))
	if err != nil || !u.CorsSet {
		t.Fatal(err)
	}
	if got := cur.Merge(u); len(got.Cors) != 0 || got.Logging != cur.Logging {
		t.Fatalf("cors not cleared: %+v", got)
	}
	u, err = ParseServiceProperties([]byte(`<StorageServiceProperties/>`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cur.Merge(u); !reflect.DeepEqual(got, cur) {
		t.Fatalf("empty update changed %+v", got)
	}
	// Merge must not alias the update's rules.
	u, _ = ParseServiceProperties([]byte(docSample))
	merged := DefaultServiceProperties().Merge(u)
	u.Cors[0].AllowedMethods = "DELETE"
	if merged.Cors[0].AllowedMethods != "GET,PUT" {
		t.Fatal("Merge aliases the update's CORS rules")
	}
}

func corsDoc(rules ...string) string {
	return "<StorageServiceProperties><Cors>" + strings.Join(rules, "") + "</Cors></StorageServiceProperties>"
}

func corsRule(origins, methods, maxAge, exposed, allowed string) string {
	return "<CorsRule><AllowedOrigins>" + origins + "</AllowedOrigins><AllowedMethods>" + methods +
		"</AllowedMethods><MaxAgeInSeconds>" + maxAge + "</MaxAgeInSeconds><ExposedHeaders>" + exposed +
		"</ExposedHeaders><AllowedHeaders>" + allowed + "</AllowedHeaders></CorsRule>"
}

func TestParseServicePropertiesErrors(t *testing.T) {
	okRule := corsRule("*", "GET", "60", "", "")
	metrics := func(inner string) string {
		return "<StorageServiceProperties><HourMetrics>" + inner + "</HourMetrics></StorageServiceProperties>"
	}
	logging := func(inner string) string {
		return "<StorageServiceProperties><Logging>" + inner + "</Logging></StorageServiceProperties>"
	}
	keep := "<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>"
	headers65 := strings.TrimSuffix(strings.Repeat("x-h,", 65), ",")
	for _, c := range []struct{ name, doc string }{
		{"not xml", "hello"},
		{"empty", ""},
		{"unclosed", "<StorageServiceProperties><Logging>"},
		{"wrong root", "<ServiceProperties/>"},
		{"trailing element", "<StorageServiceProperties/><x/>"},
		{"trailing text", "<StorageServiceProperties/>junk"},
		{"days 366 (recorded)", `<StorageServiceProperties><MinuteMetrics><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>366</Days></RetentionPolicy><Version>1.0</Version></MinuteMetrics></StorageServiceProperties>`},
		{"days 0", metrics("<Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>true</Enabled><Days>0</Days></RetentionPolicy>")},
		{"days missing", metrics("<Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>true</Enabled></RetentionPolicy>")},
		{"days not a number", metrics("<Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>true</Enabled><Days>seven</Days></RetentionPolicy>")},
		{"retention missing", metrics("<Version>1.0</Version><Enabled>false</Enabled>")},
		{"retention enabled missing", metrics("<Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Days>3</Days></RetentionPolicy>")},
		{"metrics version missing", metrics("<Enabled>false</Enabled>" + keep)},
		{"metrics version empty", metrics("<Version></Version><Enabled>false</Enabled>" + keep)},
		{"metrics enabled missing", metrics("<Version>1.0</Version>" + keep)},
		{"metrics enabled not bool", metrics("<Version>1.0</Version><Enabled>yes</Enabled>" + keep)},
		{"include apis missing when enabled", metrics("<Version>1.0</Version><Enabled>true</Enabled>" + keep)},
		{"logging delete missing", logging("<Version>1.0</Version><Read>true</Read><Write>true</Write>" + keep)},
		{"logging read missing", logging("<Version>1.0</Version><Delete>true</Delete><Write>true</Write>" + keep)},
		{"logging write missing", logging("<Version>1.0</Version><Delete>true</Delete><Read>true</Read>" + keep)},
		{"logging version missing", logging("<Delete>true</Delete><Read>true</Read><Write>true</Write>" + keep)},
		{"logging retention missing", logging("<Version>1.0</Version><Delete>true</Delete><Read>true</Read><Write>true</Write>")},
		{"six cors rules", corsDoc(okRule, okRule, okRule, okRule, okRule, okRule)},
		{"origins missing", corsDoc("<CorsRule><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds><ExposedHeaders/><AllowedHeaders/></CorsRule>")},
		{"methods missing", corsDoc("<CorsRule><AllowedOrigins>*</AllowedOrigins><MaxAgeInSeconds>1</MaxAgeInSeconds><ExposedHeaders/><AllowedHeaders/></CorsRule>")},
		{"max age missing", corsDoc("<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><ExposedHeaders/><AllowedHeaders/></CorsRule>")},
		{"exposed missing", corsDoc("<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds><AllowedHeaders/></CorsRule>")},
		{"allowed missing", corsDoc("<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds><ExposedHeaders/></CorsRule>")},
		{"empty origins", corsDoc(corsRule("", "GET", "1", "", ""))},
		{"empty origin in list", corsDoc(corsRule("http://a,,http://b", "GET", "1", "", ""))},
		{"origin too long", corsDoc(corsRule("http://"+strings.Repeat("a", 250), "GET", "1", "", ""))},
		{"65 origins", corsDoc(corsRule(strings.TrimSuffix(strings.Repeat("http://a,", 65), ","), "GET", "1", "", ""))},
		{"empty methods", corsDoc(corsRule("*", "", "1", "", ""))},
		{"unknown method", corsDoc(corsRule("*", "GET,TRACE", "1", "", ""))},
		{"negative max age", corsDoc(corsRule("*", "GET", "-1", "", ""))},
		{"max age not a number", corsDoc(corsRule("*", "GET", "1.5", "", ""))},
		{"max age too large", corsDoc(corsRule("*", "GET", "2147483648", "", ""))},
		{"65 literal headers", corsDoc(corsRule("*", "GET", "1", "", headers65))},
		{"3 prefixed headers", corsDoc(corsRule("*", "GET", "1", "a*,b*,c*", ""))},
		{"header too long", corsDoc(corsRule("*", "GET", "1", "", strings.Repeat("h", 257)))},
		{"empty header in list", corsDoc(corsRule("*", "GET", "1", "a,,b", ""))},
		{"values over 2 KiB", corsDoc(corsRule(strings.TrimSuffix(strings.Repeat("http://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,", 40), ","), "GET", "1", "", ""))},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseServiceProperties([]byte(c.doc))
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Code != CodeInvalidXMLDocument || e.Message != MsgInvalidXMLDocument || e.Detail == "" {
				t.Fatalf("got %v, want 400 InvalidXmlDocument", err)
			}
		})
	}
	_, err := ParseServiceProperties(make([]byte, MaxDocumentBytes+1))
	if ErrorCode(err) != CodeRequestBodyTooLarge {
		t.Fatalf("oversized document: %v", err)
	}
}

func TestParseServicePropertiesLimitsAccepted(t *testing.T) {
	headers64 := strings.TrimSuffix(strings.Repeat("x-h,", 64), ",")
	for _, doc := range []string{
		corsDoc(corsRule("*", "GET", "1", "", "")),
		corsDoc(corsRule("*", "get, put ,MERGE", "0", "a*,b*", headers64)),
		corsDoc(corsRule("http://"+strings.Repeat("a", 249), "GET", "1", "", "")),
		"<StorageServiceProperties><HourMetrics><Version>1.0</Version><Enabled>false</Enabled><IncludeAPIs>junk-ignored-when-disabled</IncludeAPIs><RetentionPolicy><Enabled>false</Enabled><Days>999</Days></RetentionPolicy></HourMetrics></StorageServiceProperties>",
		"<StorageServiceProperties><HourMetrics><Version>1.0</Version><Enabled>1</Enabled><IncludeAPIs>0</IncludeAPIs><RetentionPolicy><Enabled>TRUE</Enabled><Days> 1 </Days></RetentionPolicy></HourMetrics></StorageServiceProperties>",
		`<?xml version="1.0" encoding="utf-8"?><!-- c --><StorageServiceProperties xmlns="urn:x"/><!-- after -->` + "\n",
	} {
		if _, err := ParseServiceProperties([]byte(doc)); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestErrorDocument(t *testing.T) {
	got := string(ErrorDocument("InvalidXmlDocument", MsgInvalidXMLDocument, "a05c5eae-9002-0057-1bc9-874646000000", time.Date(2021, 8, 2, 18, 5, 38, 993048300, time.UTC)))
	want := "<?xml version=\"1.0\" encoding=\"utf-8\"?><m:error xmlns:m=\"http://schemas.microsoft.com/ado/2007/08/dataservices/metadata\"><m:code>InvalidXmlDocument</m:code><m:message xml:lang=\"en-US\">XML specified is not syntactically valid.\nRequestId:a05c5eae-9002-0057-1bc9-874646000000\nTime:2021-08-02T18:05:38.9930483Z</m:message></m:error>"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if s := string(ErrorDocument("C<", "a&b", "r", time.Time{})); !strings.Contains(s, "C&lt;") || !strings.Contains(s, "a&amp;b") {
		t.Fatal(s)
	}
}
