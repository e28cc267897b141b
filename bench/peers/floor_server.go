package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The floor is not a Table service. It is the least a Go server on
// net/http must spend to take the REST suite's requests and send Tabula's
// answers to them, byte for byte the same length: the same status line,
// the same header names with values of the same length, bodies of the
// same length (the entity a point get names, the partition a query names,
// a $batch response with one part per operation). It does no
// authentication, no parsing beyond a few byte searches for the keys its
// answers echo, and no storage. Run beside Tabula and Azurite, it shows
// how much of a request's server CPU is the transport itself: a figure a
// server on net/http cannot go below on the machine, and so a yardstick
// for CPU targets set against another system.
//
// It answers the workloads whose responses it can rebuild from the request
// alone; the filtered scan (whose pages depend on the data) is skipped,
// and it has no durability to test. Gets and queries return the shared
// data set as loaded: once the update workload has rewritten an entity
// (its Count, Big, Score, Active and Tag follow the op's index), Tabula's
// answer to a get of it differs from the floor's by a few bytes. TestFloorMatchesTabula sends every
// request of those workloads to a real Tabula and to the floor and
// compares the raw responses.

// floorWorkloads are the REST workloads the floor can answer.
var floorWorkloads = map[string]bool{
	"insert": true, "get": true, "update": true, "mixed": true, "partquery": true,
	"batch100": true, "hotpartition": true, "append-pk": true, "scattered-pk": true,
}

// floorKind runs this binary's hidden floor-server subcommand.
func floorKind(self string) serverKind {
	return serverKind{name: floorSystem, launch: onePort(func(port int, dir string) *exec.Cmd {
		return exec.Command(self, "floor-server", "-addr", fmt.Sprintf("127.0.0.1:%d", port))
	})}
}

// isFloor reports whether a system is the floor.
func isFloor(system string) bool { return system == floorSystem }

// runFloorServer is the hidden floor-server subcommand.
func runFloorServer(args []string, log io.Writer) error {
	fs := flag.NewFlagSet("floor-server", flag.ContinueOnError)
	fs.SetOutput(log)
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	return newFloorServer().Serve(ln)
}

// newFloorServer is the floor on net/http, with Tabula's timeouts.
func newFloorServer() *http.Server {
	return &http.Server{Handler: newFloorHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
}

// The floor's stand-ins for values whose content varies but whose length
// does not: a commit time as Tabula writes it (seven fractional digits,
// the last not zero: Tabula trims trailing zeros in bodies), its ETag, a
// request id and $batch boundaries (GUIDs).
const (
	floorTime      = "2026-11-25T02:14:32.1234567Z"
	floorETag      = `W/"datetime'2026-11-25T02%3A14%3A32.1234567Z'"`
	floorRequestID = "00000000-0000-4000-8000-000000000000"
	floorBatch     = "batchresponse_00000000-0000-4000-8000-000000000001"
	floorChangeset = "changesetresponse_00000000-0000-4000-8000-000000000002"
	// floorServerName has the length of "Tabula", Tabula's Server header.
	floorServerName = "floor_"
)

// Header values, allocated once.
var (
	floorJSONType     = []string{"application/json;odata=nometadata;streaming=true;charset=utf-8"}
	floorBatchType    = []string{"multipart/mixed; boundary=" + floorBatch}
	floorDSV3         = []string{"3.0;"}
	floorDSV1         = []string{"1.0;"}
	floorETagValue    = []string{floorETag}
	floorNoContent    = []string{"return-no-content"}
	floorServerValue  = []string{floorServerName}
	floorRequestValue = []string{floorRequestID}
	floorVersionValue = []string{"2019-02-02"}
)

// floorHandler answers the REST suite's requests.
type floorHandler struct {
	date     atomic.Pointer[floorDate] // the Date header, kept for its second as Tabula does
	entities sync.Map                  // entity path -> body of a point get
	pages    sync.Map                  // partition key -> body of a query of it
}

type floorDate struct {
	sec  int64
	text []string
}

func newFloorHandler() *floorHandler { return &floorHandler{} }

func (h *floorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	hdr := w.Header()
	// Tabula's headers on every response, in Go's canonical spelling.
	hdr["Date"] = h.httpDate()
	hdr["Server"] = floorServerValue
	hdr["X-Ms-Request-Id"] = floorRequestValue
	hdr["X-Ms-Version"] = floorVersionValue
	path := r.URL.EscapedPath()
	base, table, ok := floorTarget(r.Host, path)
	switch {
	case !ok:
		floorRefuse(w)
	case r.Method == http.MethodPost && table == "$batch":
		h.batch(w, r.Host, body)
	case r.Method == http.MethodPost && table == "Tables": // create table, Prefer: return-no-content
		name, ok := jsonString(body, "TableName")
		if !ok {
			floorRefuse(w)
			return
		}
		loc := []string{base + "Tables('" + name + "')"}
		hdr["Location"], hdr["Dataserviceid"] = loc, loc
		hdr["Dataserviceversion"] = floorDSV3
		hdr["Preference-Applied"] = floorNoContent
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPost && !strings.ContainsRune(table, '('): // insert, Prefer: return-no-content
		pk, ok1 := jsonString(body, "PartitionKey")
		rk, ok2 := jsonString(body, "RowKey")
		if !ok1 || !ok2 {
			floorRefuse(w)
			return
		}
		loc := []string{base + table + "(PartitionKey='" + pk + "',RowKey='" + rk + "')"}
		hdr["Location"], hdr["Dataserviceid"] = loc, loc
		hdr["Dataserviceversion"] = floorDSV3
		hdr["Etag"] = floorETagValue
		hdr["Preference-Applied"] = floorNoContent
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && strings.HasPrefix(table, "data(PartitionKey="): // point get
		e, ok := h.entity(table)
		if !ok {
			floorRefuse(w)
			return
		}
		hdr["Etag"] = floorETagValue
		floorJSON(w, e)
	case r.Method == http.MethodGet && table == "data()": // a query of one partition
		p, ok := h.page(r.URL.RawQuery)
		if !ok {
			floorRefuse(w)
			return
		}
		floorJSON(w, p)
	case r.Method == http.MethodPut && strings.Contains(table, "(PartitionKey="): // update
		hdr["Dataserviceversion"] = floorDSV1
		hdr["Etag"] = floorETagValue
		w.WriteHeader(http.StatusNoContent)
	default:
		floorRefuse(w)
	}
}

// floorTarget splits /devstoreaccount1/<rest> into the service root as
// Tabula writes it in Location headers and the rest.
func floorTarget(host, path string) (base, rest string, ok bool) {
	rest, ok = strings.CutPrefix(path, "/"+devAccount+"/")
	return "http://" + host + "/" + devAccount + "/", rest, ok
}

// floorRefuse answers a request the floor does not know: the suite
// counts it as an error.
func floorRefuse(w http.ResponseWriter) {
	http.Error(w, "the floor server does not answer this request", http.StatusNotImplemented)
}

func floorJSON(w http.ResponseWriter, body []byte) {
	hdr := w.Header()
	hdr["Content-Type"] = floorJSONType
	hdr["Dataserviceversion"] = floorDSV3
	hdr["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

func (h *floorHandler) httpDate() []string {
	now := time.Now()
	if d := h.date.Load(); d != nil && d.sec == now.Unix() {
		return d.text
	}
	d := &floorDate{sec: now.Unix(), text: []string{now.UTC().Format(http.TimeFormat)}}
	h.date.Store(d)
	return d.text
}

// jsonString finds "name":"value" in a JSON body by a byte search and
// returns value; the suite's keys and names need no unescaping.
func jsonString(body []byte, name string) (string, bool) {
	_, after, ok := bytes.Cut(body, []byte(`"`+name+`":"`))
	if !ok {
		return "", false
	}
	v, _, ok := bytes.Cut(after, []byte(`"`))
	return string(v), ok
}

// The shared data set (restCtx.setup): partition p%04d holds RowKeys
// r000..r099, entity (p, r) loaded as benchEntityJSON with n = 100p + r.

// floorEntityJSON is entity (pk, rk, n) as Tabula returns it without
// metadata: the keys, then its Timestamp, then the other properties
// without their type annotations.
func floorEntityJSON(pk, rk string, n int) []byte {
	e := benchEntityJSON(pk, rk, n)
	e = bytes.Replace(e, []byte(`"Big@odata.type":"Edm.Int64",`), nil, 1)
	keys := fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q,`, pk, rk)
	out := append([]byte(keys), `"Timestamp":"`+floorTime+`",`...)
	return append(out, e[len(keys):]...)
}

// entity returns the body of a point get of data(PartitionKey='p…',RowKey='r…').
func (h *floorHandler) entity(target string) ([]byte, bool) {
	if e, ok := h.entities.Load(target); ok {
		return e.([]byte), true
	}
	var p, r int
	if n, err := fmt.Sscanf(target, "data(PartitionKey='p%04d',RowKey='r%03d')", &p, &r); n != 2 || err != nil {
		return nil, false
	}
	e := floorEntityJSON(fmt.Sprintf("p%04d", p), fmt.Sprintf("r%03d", r), 100*p+r)
	h.entities.Store(target, e)
	return e, true
}

// page returns the body of a query "PartitionKey eq 'p…'" of the data
// table: its hundred entities, in one page.
func (h *floorHandler) page(rawQuery string) ([]byte, bool) {
	const prefix = "$filter=PartitionKey+eq+%27"
	rest, ok := strings.CutPrefix(rawQuery, prefix)
	pk, _, ok2 := strings.Cut(rest, "%27")
	if !ok || !ok2 {
		return nil, false
	}
	if b, ok := h.pages.Load(pk); ok {
		return b.([]byte), true
	}
	var p int
	if n, err := fmt.Sscanf(pk, "p%04d", &p); n != 1 || err != nil {
		return nil, false
	}
	var b bytes.Buffer
	b.WriteString(`{"value":[`)
	for r := range 100 {
		if r > 0 {
			b.WriteByte(',')
		}
		b.Write(floorEntityJSON(pk, fmt.Sprintf("r%03d", r), 100*p+r))
	}
	b.WriteString("]}")
	h.pages.Store(pk, b.Bytes())
	return b.Bytes(), true
}

// batch answers a $batch of inserts with Prefer: return-no-content, as
// Tabula does: one 204 part per operation, each naming the entity it
// created. Operations are found by their request lines ("POST <url>
// HTTP/1.1"), keys by byte searches in the body that follows.
func (h *floorHandler) batch(w http.ResponseWriter, host string, body []byte) {
	var b bytes.Buffer
	b.WriteString("--" + floorBatch + "\r\nContent-Type: multipart/mixed; boundary=" + floorChangeset + "\r\n\r\n")
	ops := 0
	for rest := body; ; {
		_, after, ok := bytes.Cut(rest, []byte("\r\nPOST "))
		if !ok {
			break
		}
		line, after, _ := bytes.Cut(after, []byte("\r\n"))
		url, _, _ := bytes.Cut(line, []byte(" "))
		table := url[bytes.LastIndexByte(url, '/')+1:]
		next := bytes.Index(after, []byte("\r\nPOST "))
		if next < 0 {
			next = len(after)
		}
		pk, ok1 := jsonString(after[:next], "PartitionKey")
		rk, ok2 := jsonString(after[:next], "RowKey")
		if !ok1 || !ok2 {
			floorRefuse(w)
			return
		}
		loc := "http://" + host + "/" + devAccount + "/" + string(table) + "(PartitionKey='" + pk + "',RowKey='" + rk + "')"
		b.WriteString("--" + floorChangeset + "\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
			"HTTP/1.1 204 No Content\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\n" +
			"Preference-Applied: return-no-content\r\nDataServiceVersion: 3.0;\r\n" +
			"Location: " + loc + "\r\nDataServiceId: " + loc + "\r\nETag: " + floorETag + "\r\n\r\n\r\n")
		rest = after[next:]
		ops++
	}
	if ops == 0 {
		floorRefuse(w)
		return
	}
	b.WriteString("--" + floorChangeset + "--\r\n--" + floorBatch + "--\r\n")
	hdr := w.Header()
	hdr["Content-Type"] = floorBatchType
	hdr["Dataserviceversion"] = floorDSV3
	hdr["Content-Length"] = []string{strconv.Itoa(b.Len())}
	w.WriteHeader(http.StatusAccepted)
	w.Write(b.Bytes())
}
