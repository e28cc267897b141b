// Package http1 serves HTTP/1.1 to an http.Handler with less work per
// request than net/http's Server, for the Table service's small,
// keep-alive, request-response traffic.
//
// Measured on the REST benchmark (bench/peers rest), net/http's server
// spent about 40 µs of CPU on each keep-alive request that a bare loop
// over the socket answered in 18: a goroutine and a read syscall per
// request to watch for a disconnecting client, a context and its cancel,
// header maps filled key by key, headers sorted and written through a
// chunk writer, several deadline changes. This package parses each
// request into an ordinary *http.Request (so handlers, auth and tests are
// unchanged) and writes the response with one write call when it fits in
// a buffer, and nothing else:
//
//   - Connections are kept alive (HTTP/1.1 by default, HTTP/1.0 when the
//     client asks), and pipelined requests are answered in order.
//   - Request bodies are framed by Content-Length or chunked
//     Transfer-Encoding; "Expect: 100-continue" is answered when the
//     handler first reads the body. A request with both framings, a
//     malformed length, an unknown transfer coding, an obsolete folded
//     header line or a header over Options.MaxHeaderBytes is refused with
//     400, 501 or 431 and the connection closed.
//   - A response whose handler set Content-Length is streamed with it; one
//     without is buffered and given a length when it is small, and chunked
//     (closed, for HTTP/1.0) when it is not. HEAD responses carry headers
//     only.
//   - Deadlines: IdleTimeout between requests, ReadHeaderTimeout from a
//     request's first byte to the end of its header, ReadTimeout for the
//     whole request with its body, WriteTimeout for each response.
//   - Shutdown closes the listeners and idle connections and waits for the
//     requests in flight; Close cancels their context and closes
//     everything.
//
// What it does not do, because the Table service does not need it: TLS,
// HTTP/2, connection hijacking, trailers in responses, content sniffing,
// and cancelling a request's context when its client disconnects (a
// request's context ends only when the server is closed).
package http1
