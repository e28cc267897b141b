package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tabuladb/tabula/server"
)

// inspectHot prints the hottest partitions and accounts of a running
// server started with --emulate-limits: tabula inspect --hot ADDR.
func inspectHot(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inspect --hot", "usage: tabula inspect --hot [-n N] ADDR   (ADDR: 127.0.0.1:10002, or a URL such as https://127.0.0.1:10002)", stderr)
	n := fs.Int("n", 20, "how many partitions and accounts to list (1 to 1000)")
	addr, ok := parseOneArg(fs, args)
	if !ok {
		return 2
	}
	if *n < 1 || *n > 1000 {
		fmt.Fprintf(stderr, "tabula inspect --hot: -n %d: want 1 to 1000\n", *n)
		return 2
	}
	r, err := fetchHot(addr, *n)
	if err != nil {
		fmt.Fprintln(stderr, "tabula inspect --hot:", err)
		return 1
	}
	printHot(stdout, r)
	return 0
}

// fetchHot reads the hot view of the server at addr.
func fetchHot(addr string, n int) (server.HotReport, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return server.HotReport{}, fmt.Errorf("%q is not an address such as 127.0.0.1:10002", addr)
	}
	u.Path, u.RawQuery = server.HotPath, fmt.Sprintf("n=%d", n)
	tr := &http.Transport{}
	if ip := net.ParseIP(u.Hostname()); u.Scheme == "https" && (u.Hostname() == "localhost" || ip != nil && ip.IsLoopback()) {
		// The hot view is served to loopback clients only, and serve
		// --https makes its own certificate: on this machine's own
		// interface there is no one to be fooled by a forged one.
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Get(u.String())
	if err != nil {
		return server.HotReport{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return server.HotReport{}, err
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusForbidden || len(msg) > 200 {
			msg = resp.Status
		}
		return server.HotReport{}, fmt.Errorf("%s: %s", u, msg)
	}
	var r server.HotReport
	if err := json.Unmarshal(body, &r); err != nil {
		return server.HotReport{}, errors.New(u.String() + ": not a hot view: " + err.Error())
	}
	return r, nil
}

func printHot(w io.Writer, r server.HotReport) {
	fmt.Fprintf(w, "limits: %g entities/s a partition, %g an account; %d partitions tracked\n\n", r.PartitionRate, r.AccountRate, r.Tracked)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tTABLE\tPARTITIONKEY\tSERVED/S\tREFUSED/S\tOF LIMIT")
	for _, p := range r.Partitions {
		fmt.Fprintf(tw, "%s\t%s\t%q\t%.1f\t%.1f\t%.0f%%\n", p.Account, p.Table, p.PartitionKey, p.Rate, p.Refused, 100*p.Rate/r.PartitionRate)
	}
	if len(r.Partitions) == 0 {
		fmt.Fprintln(tw, "(no partition busy in the last seconds)")
	}
	fmt.Fprintln(tw, "\nACCOUNT\t\t\tSERVED/S\tREFUSED/S\tOF LIMIT")
	for _, a := range r.Accounts {
		fmt.Fprintf(tw, "%s\t\t\t%.1f\t%.1f\t%.0f%%\n", a.Account, a.Rate, a.Refused, 100*a.Rate/r.AccountRate)
	}
	tw.Flush()
}
