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
	"time"

	"github.com/tabuladb/tabula/server/http1"
)

// The floor is not a Table service. It is the least a Go server must
// spend to take the REST suite's requests and send answers of the same
// shape and size as Tabula's (status, headers, JSON bodies, a $batch
// response with one part per operation), with no authentication, no
// parsing and no storage. Run beside Tabula and Azurite, it shows how much
// of a request's server CPU is the transport itself: a figure a server on
// that transport cannot go below on the machine, and so a yardstick for
// CPU targets set against another system. System "floor" runs on Tabula's
// own transport (server/http1), "floor-nethttp" on net/http's server.
//
// It answers the workloads whose responses it can fake faithfully; the
// filtered scan (whose pages depend on the data) is skipped, and it has no
// durability to test.

// floorWorkloads are the REST workloads the floor can answer.
var floorWorkloads = map[string]bool{
	"insert": true, "get": true, "update": true, "mixed": true, "partquery": true,
	"batch100": true, "hotpartition": true, "append-pk": true, "scattered-pk": true,
}

// floorKind runs this binary's hidden floor-server subcommand as system
// name, on transport "http1" or "nethttp".
func floorKind(self, name, transport string) serverKind {
	return serverKind{name: name, start: func(port int, dir string) (*exec.Cmd, error) {
		return exec.Command(self, "floor-server", "-addr", fmt.Sprintf("127.0.0.1:%d", port), "-transport", transport), nil
	}}
}

// isFloor reports whether a system is one of the floors.
func isFloor(system string) bool { return strings.HasPrefix(system, "floor") }

// runFloorServer is the hidden floor-server subcommand.
func runFloorServer(args []string, log io.Writer) error {
	fs := flag.NewFlagSet("floor-server", flag.ContinueOnError)
	fs.SetOutput(log)
	addr := fs.String("addr", "127.0.0.1:0", "address to listen on")
	transport := fs.String("transport", "http1", "http1 (Tabula's server/http1) or nethttp (net/http's Server)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	h, timeout := newFloorHandler(), 10*time.Second
	switch *transport {
	case "http1":
		return http1.New(http1.Options{Handler: h, ReadHeaderTimeout: timeout}).Serve(ln)
	case "nethttp":
		return (&http.Server{Handler: h, ReadHeaderTimeout: timeout}).Serve(ln)
	}
	ln.Close()
	return fmt.Errorf("floor-server: unknown transport %q", *transport)
}

// floorHandler holds the canned bodies, built once.
type floorHandler struct {
	entity []byte // one entity as a point get returns it
	page   []byte // a page of 100 such entities
}

const floorETag = `W/"datetime'2026-11-25T02%3A14%3A32.1234567Z'"`

func newFloorHandler() *floorHandler {
	entity := func(i int) []byte {
		e := benchEntityJSON("p0042", fmt.Sprintf("r%03d", i), 4200+i)
		extra := `{"odata.etag":"W/\"datetime'2026-11-25T02%3A14%3A32.1234567Z'\"","Timestamp@odata.type":"Edm.DateTime","Timestamp":"2026-11-25T02:14:32.1234567Z",`
		return append([]byte(extra), e[1:]...)
	}
	h := &floorHandler{}
	h.entity = append([]byte(`{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#data/@Element",`), entity(42)[1:]...)
	var page bytes.Buffer
	page.WriteString(`{"odata.metadata":"http://127.0.0.1:10002/devstoreaccount1/$metadata#data","value":[`)
	for i := range 100 {
		if i > 0 {
			page.WriteByte(',')
		}
		page.Write(entity(i))
	}
	page.WriteString("]}")
	h.page = page.Bytes()
	return h
}

func (h *floorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	hdr := w.Header()
	hdr.Set("x-ms-request-id", "00000000-0000-4000-8000-000000000000")
	hdr.Set("x-ms-version", "2019-02-02")
	hdr.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	hdr.Set("Server", "floor")
	path := r.URL.EscapedPath()
	switch {
	case strings.HasSuffix(path, "/$batch"):
		h.batch(w, body)
	case r.Method == http.MethodPost: // create table, insert
		hdr.Set("Location", "http://127.0.0.1:10002/devstoreaccount1/t(PartitionKey='p',RowKey='r')")
		hdr.Set("DataServiceId", "http://127.0.0.1:10002/devstoreaccount1/t(PartitionKey='p',RowKey='r')")
		hdr.Set("DataServiceVersion", "3.0;")
		hdr.Set("Preference-Applied", "return-no-content")
		hdr.Set("ETag", floorETag)
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodGet && strings.Contains(path, "(PartitionKey="):
		reply(w, http.StatusOK, h.entity, floorETag)
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/data()"):
		reply(w, http.StatusOK, h.page, "")
	case r.Method == http.MethodPut || r.Method == "MERGE" || r.Method == http.MethodDelete:
		hdr.Set("ETag", floorETag)
		hdr.Set("DataServiceVersion", "1.0;")
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "the floor server does not answer this request", http.StatusNotImplemented)
	}
}

func reply(w http.ResponseWriter, status int, body []byte, etag string) {
	hdr := w.Header()
	if etag != "" {
		hdr.Set("ETag", etag)
	}
	hdr.Set("DataServiceVersion", "3.0;")
	hdr.Set("Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

// batch answers a $batch with one 204 part per operation in it, as
// Tabula's answer to the suite's batches of Prefer: return-no-content
// inserts.
func (h *floorHandler) batch(w http.ResponseWriter, body []byte) {
	ops := bytes.Count(body, []byte("Content-Transfer-Encoding: binary"))
	var b bytes.Buffer
	b.WriteString("--batchresponse_floor\r\nContent-Type: multipart/mixed; boundary=changesetresponse_floor\r\n\r\n")
	for i := range ops {
		fmt.Fprintf(&b, "--changesetresponse_floor\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"+
			"HTTP/1.1 204 No Content\r\nContent-ID: %d\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\nDataServiceVersion: 1.0;\r\n"+
			"Location: http://127.0.0.1:10002/devstoreaccount1/batch(PartitionKey='b000000001',RowKey='r%03d')\r\n"+
			"DataServiceId: http://127.0.0.1:10002/devstoreaccount1/batch(PartitionKey='b000000001',RowKey='r%03d')\r\n"+
			"Preference-Applied: return-no-content\r\nETag: %s\r\n\r\n", i+1, i, i, floorETag)
	}
	b.WriteString("--changesetresponse_floor--\r\n--batchresponse_floor--\r\n")
	hdr := w.Header()
	hdr.Set("Content-Type", "multipart/mixed; boundary=batchresponse_floor")
	hdr.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(http.StatusAccepted)
	w.Write(b.Bytes())
}
