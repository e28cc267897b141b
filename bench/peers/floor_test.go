package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// rawResponse is an HTTP/1.1 response as read off the socket.
type rawResponse struct {
	statusLine string      // without its CRLF
	headers    [][2]string // name and value, in the order sent
	head       int         // bytes of the status line and header block, CRLFs and the blank line included
	body       []byte      // as framed by Content-Length (the floor and Tabula never chunk)
	raw        []byte      // every byte of the response
}

func (r *rawResponse) header(name string) (string, bool) {
	for _, h := range r.headers {
		if strings.EqualFold(h[0], name) {
			return h[1], true
		}
	}
	return "", false
}

// readRawResponse reads one response to a request of method from br.
func readRawResponse(br *bufio.Reader, method string) (*rawResponse, error) {
	r := &rawResponse{}
	var raw bytes.Buffer
	line := func() (string, error) {
		s, err := br.ReadString('\n')
		raw.WriteString(s)
		if err != nil {
			return "", err
		}
		if !strings.HasSuffix(s, "\r\n") {
			return "", fmt.Errorf("line without CRLF: %q", s)
		}
		return strings.TrimSuffix(s, "\r\n"), nil
	}
	var err error
	if r.statusLine, err = line(); err != nil {
		return nil, err
	}
	for {
		l, err := line()
		if err != nil {
			return nil, err
		}
		if l == "" {
			break
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("header line %q", l)
		}
		r.headers = append(r.headers, [2]string{name, strings.TrimLeft(value, " ")})
	}
	r.head = raw.Len()
	status := strings.Fields(r.statusLine)
	if len(status) < 2 {
		return nil, fmt.Errorf("status line %q", r.statusLine)
	}
	if te, ok := r.header("Transfer-Encoding"); ok {
		return nil, fmt.Errorf("Transfer-Encoding %s: the comparison expects Content-Length framing", te)
	}
	if cl, ok := r.header("Content-Length"); ok && method != http.MethodHead {
		n, err := strconv.Atoi(cl)
		if err != nil {
			return nil, fmt.Errorf("Content-Length %q", cl)
		}
		r.body = make([]byte, n)
		if _, err := io.ReadFull(br, r.body); err != nil {
			return nil, err
		}
		raw.Write(r.body)
	} else if code := status[1]; code != "204" && code != "304" && code[0] != '1' && method != http.MethodHead {
		return nil, fmt.Errorf("%s: a body without Content-Length", r.statusLine)
	}
	r.raw = raw.Bytes()
	return r, nil
}

// exchange is one request sent to both servers, and their answers.
type exchange struct {
	label          string // the workload
	request        string // method and path
	tabula, floor  *rawResponse
	tabulaNormBody []byte // Tabula's body with its trimmed timestamps padded (see padTimestamps)
}

// twinTransport is an http.RoundTripper that sends each request's bytes,
// unchanged, over one keep-alive connection to Tabula and over one to the
// floor, records both raw answers, and gives the client Tabula's.
type twinTransport struct {
	mu            sync.Mutex
	label         string
	tabula, floor net.Conn
	tbr, fbr      *bufio.Reader
	log           []exchange
}

func newTwinTransport(tabulaAddr, floorAddr string) (*twinTransport, error) {
	tc, err := net.Dial("tcp", tabulaAddr)
	if err != nil {
		return nil, err
	}
	fc, err := net.Dial("tcp", floorAddr)
	if err != nil {
		tc.Close()
		return nil, err
	}
	return &twinTransport{tabula: tc, floor: fc, tbr: bufio.NewReader(tc), fbr: bufio.NewReader(fc)}, nil
}

func (t *twinTransport) close() { t.tabula.Close(); t.floor.Close() }

func (t *twinTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if req.Header.Get("Accept-Encoding") == "" {
		req.Header.Set("Accept-Encoding", "gzip") // as http.Transport sends it
	}
	var wire bytes.Buffer
	if err := req.Write(&wire); err != nil {
		return nil, err
	}
	ask := func(c net.Conn, br *bufio.Reader) (*rawResponse, error) {
		if _, err := c.Write(wire.Bytes()); err != nil {
			return nil, err
		}
		return readRawResponse(br, req.Method)
	}
	tr, err := ask(t.tabula, t.tbr)
	if err != nil {
		return nil, fmt.Errorf("tabula: %w", err)
	}
	fr, err := ask(t.floor, t.fbr)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	t.log = append(t.log, exchange{label: t.label, request: req.Method + " " + req.URL.RequestURI(), tabula: tr, floor: fr,
		tabulaNormBody: padTimestamps(tr.body)})
	return http.ReadResponse(bufio.NewReader(bytes.NewReader(tr.raw)), req)
}

// bodyTimestamp is a commit time in a JSON body. Tabula writes seven
// fractional digits less its trailing zeros (…26.03266Z for …26.0326600Z),
// so one entity in ten is a byte or more shorter; the floor always writes
// seven, Tabula's most common length.
var bodyTimestamp = regexp.MustCompile(`("Timestamp":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,7}))?Z"`)

// padTimestamps pads every trimmed Timestamp in a body back to seven
// digits, the length it has when its last digit is not zero.
func padTimestamps(body []byte) []byte {
	return bodyTimestamp.ReplaceAllFunc(body, func(m []byte) []byte {
		sub := bodyTimestamp.FindSubmatch(m)
		frac := string(sub[2]) + strings.Repeat("0", 7-len(sub[2]))
		return []byte(string(sub[1]) + "." + frac + `Z"`)
	})
}

// masked replaces, in a body, the values that differ in content but not
// in length between Tabula and the floor: times (as bodies and ETags spell
// them) and GUIDs (batch boundaries).
var maskTime = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d(?::|%3A)\d\d(?::|%3A)\d\d\.\d{7}Z`)
var maskGUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func masked(b []byte) []byte {
	return maskGUID.ReplaceAll(maskTime.ReplaceAll(b, []byte("<time>")), []byte("<guid>"))
}

// compareExchange returns what differs between Tabula's and the floor's
// answer to one request, by length: status line, each header's name and
// value length, body length; and the bodies' content once times and GUIDs
// are masked.
func compareExchange(x exchange) []string {
	var diffs []string
	tr, fr := x.tabula, x.floor
	if tr.statusLine != fr.statusLine {
		diffs = append(diffs, fmt.Sprintf("status line %q vs %q", tr.statusLine, fr.statusLine))
	}
	type hv struct {
		name string
		len  int
	}
	list := func(r *rawResponse, body []byte, tabula bool) []hv {
		var out []hv
		for _, h := range r.headers {
			name, value := strings.ToLower(h[0]), h[1]
			if tabula && name == "content-length" {
				value = strconv.Itoa(len(body)) // after padTimestamps
			}
			out = append(out, hv{name, len(value)})
		}
		slices.SortFunc(out, func(a, b hv) int { return strings.Compare(a.name, b.name) })
		return out
	}
	th, fh := list(tr, x.tabulaNormBody, true), list(fr, fr.body, false)
	if !slices.Equal(th, fh) {
		diffs = append(diffs, fmt.Sprintf("headers (name, value length):\n\ttabula %v\n\tfloor  %v", th, fh))
	}
	if len(x.tabulaNormBody) != len(fr.body) {
		diffs = append(diffs, fmt.Sprintf("body length %d (%d as sent) vs %d", len(x.tabulaNormBody), len(tr.body), len(fr.body)))
	}
	if tm, fm := masked(x.tabulaNormBody), masked(fr.body); !bytes.Equal(tm, fm) {
		i := 0
		for i < min(len(tm), len(fm)) && tm[i] == fm[i] {
			i++
		}
		diffs = append(diffs, fmt.Sprintf("bodies differ from byte %d: tabula %q, floor %q", i, tm[i:min(len(tm), i+80)], fm[i:min(len(fm), i+80)]))
	}
	return diffs
}

// floorTestOrder runs every workload the floor answers once or more, the
// reads before any update changes the data set's entities.
var floorTestOrder = []struct {
	workload string
	is       []int // op indexes: mixed gets on even ones, updates on odd
}{
	{"insert", []int{0, 1, 2}}, {"get", []int{0, 1, 2}}, {"partquery", []int{0, 1}}, {"mixed", []int{0, 2}},
	{"batch100", []int{0}}, {"hotpartition", []int{0, 1}}, {"append-pk", []int{0, 1}}, {"scattered-pk", []int{0, 1, 2, 3}},
	{"update", []int{0, 1}}, {"mixed", []int{1, 3}},
}

// TestFloorMatchesTabula starts a Tabula built from this checkout and the
// floor, sends every request of the suite's setup and of each workload the
// floor answers to both, byte for byte the same, and compares the raw
// answers: the floor's status line, header block and body must be exactly
// as long as Tabula's.
func TestFloorMatchesTabula(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := buildTabula(repo, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tab, err := startServer(tabulaKind("tabula", bin, nil), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer tab.stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	floor := newFloorServer()
	go floor.Serve(ln)
	defer floor.Close()
	checkFloorMatches(t, tab.endpoint, ln.Addr().String())
}

func checkFloorMatches(t *testing.T, tabulaEndpoint, floorAddr string) {
	tabAddr := strings.TrimSuffix(strings.TrimPrefix(tabulaEndpoint, "http://"), "/"+devAccount)
	twin, err := newTwinTransport(tabAddr, floorAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer twin.close()
	c := newTableClient(tabulaEndpoint, 1)
	c.http = &http.Client{Transport: twin}
	rc := &restCtx{c: c, dataN: 300, scanN: 200}
	twin.label = "setup"
	if err := rc.setup(1); err != nil {
		t.Fatal(err)
	}
	byName := map[string]restWorkload{}
	for _, w := range restWorkloads() {
		byName[w.name] = w
	}
	covered := map[string]bool{}
	for _, step := range floorTestOrder {
		twin.label = step.workload
		op := byName[step.workload].op(rc)
		for _, i := range step.is {
			if _, ok, err := op(0, i); !ok || err != nil {
				t.Fatalf("%s op %d against Tabula: ok %v, err %v", step.workload, i, ok, err)
			}
		}
		covered[step.workload] = true
	}
	for w := range floorWorkloads {
		if !covered[w] {
			t.Errorf("workload %s is answered by the floor but not compared", w)
		}
	}

	// Compare, and tabulate the lengths by request kind.
	type sizes struct{ n, tabHead, floorHead, tabBody, floorBody int }
	kinds := map[string]*sizes{}
	var order []string
	failures := 0
	for _, x := range twin.log {
		if d := compareExchange(x); len(d) > 0 {
			failures++
			if failures <= 10 {
				t.Errorf("%s: %s:\n%s", x.label, x.request, strings.Join(d, "\n"))
			}
		}
		kind := x.label + " " + requestKind(x.request)
		s := kinds[kind]
		if s == nil {
			s = &sizes{}
			kinds[kind] = s
			order = append(order, kind)
		}
		s.n++
		s.tabHead += x.tabula.head
		s.floorHead += x.floor.head
		s.tabBody += len(x.tabula.body)
		s.floorBody += len(x.floor.body)
	}
	if failures > 10 {
		t.Errorf("... %d exchanges differ in all", failures)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "bytes per response, Tabula vs floor (status line + headers; body as sent), %d exchanges\n", len(twin.log))
	for _, k := range order {
		s := kinds[k]
		fmt.Fprintf(&b, "  %-36s ×%-3d head %4d vs %4d   body %6d vs %6d\n", k, s.n, s.tabHead/s.n, s.floorHead/s.n, s.tabBody/s.n, s.floorBody/s.n)
	}
	t.Log(b.String())
}

// requestKind names a request by its method and the shape of its path.
func requestKind(request string) string {
	method, uri, _ := strings.Cut(request, " ")
	path, query, _ := strings.Cut(uri, "?")
	path = strings.TrimPrefix(path, "/"+devAccount+"/")
	switch {
	case strings.Contains(path, "(PartitionKey="):
		path = path[:strings.IndexByte(path, '(')] + "(keys)"
	case query != "":
		path += "?query"
	}
	return method + " " + path
}

// TestFloorRefusesTheUnknown: a request outside the suite's is an error,
// which the suite counts, not a silent success.
func TestFloorRefusesTheUnknown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	floor := newFloorServer()
	go floor.Serve(ln)
	defer floor.Close()
	c := newTableClient("http://"+ln.Addr().String()+"/"+devAccount, 1)
	for _, q := range []struct{ method, path string }{
		{"GET", "/scan()?$filter=Tag%20eq%20%27tag5%27"},
		{"GET", entityPath("data", "x", "y")},
		{"DELETE", entityPath("data", "p0001", "r001")},
		{"GET", "/Tables"},
	} {
		r, err := c.do(q.method, q.path, "", nil)
		if err != nil || r.ok() {
			t.Errorf("%s %s: status %d, err %v: want an error", q.method, q.path, r.status, err)
		}
	}
}
