package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// inbound is a stream being served.
type inbound struct {
	from   uint64
	ctx    context.Context
	cancel context.CancelFunc
}

// Handler serves the receiving side of the streams. The node mounts it on
// its internal HTTP server (cleartext HTTP/2, see ConfigureServer) at
// StreamPath.
//
// It answers 405 to a method other than POST, 505 to a request that is not
// HTTP/2, 400 to another VersionHeader, 401 (with a message saying the
// secret or the cluster does not match) to a request Verify refuses, and 503
// once the transport is closed. Otherwise it answers 200 at once and reads
// frames until the stream ends, handing each frame's messages to
// Options.Deliver. A malformed frame, or a message not from the
// authenticated sender or not to this node, ends the stream: the error is
// logged and written as the response body's only line. A newer stream from
// the same sender ends the older one.
func (t *Transport) Handler() http.Handler {
	return http.HandlerFunc(t.serveStream)
}

func (t *Transport) serveStream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "tabula: the raft stream is a POST", http.StatusMethodNotAllowed)
		return
	}
	if r.ProtoMajor != 2 {
		http.Error(w, "tabula: the raft stream needs HTTP/2 (cleartext, with prior knowledge)", http.StatusHTTPVersionNotSupported)
		return
	}
	if v := r.Header.Get(VersionHeader); v != StreamVersion {
		http.Error(w, fmt.Sprintf("tabula: raft stream version %q is not supported: this node speaks %q", v, StreamVersion), http.StatusBadRequest)
		return
	}
	from, err := Verify(r, t.secret, "raft", t.self, t.now())
	if err != nil {
		t.log.Warn("raft stream refused", "remote", r.RemoteAddr, "err", err)
		http.Error(w, "tabula: raft stream refused: "+err.Error(), http.StatusUnauthorized)
		return
	}
	if from == t.self {
		http.Error(w, "tabula: a node does not stream to itself", http.StatusBadRequest)
		return
	}
	in := t.beginInbound(from)
	if in == nil {
		http.Error(w, "tabula: the raft transport is closed", http.StatusServiceUnavailable)
		return
	}
	defer t.endInbound(in)

	rc := http.NewResponseController(w)
	// The stream lives as long as the nodes do: lift the server's timeouts.
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", streamContentType)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	// Closing the transport, or a newer stream from the sender, ends this
	// one: expire the body's reads.
	watchDone := make(chan struct{})
	stopWatch := context.AfterFunc(in.ctx, func() {
		defer close(watchDone)
		_ = rc.SetReadDeadline(time.Unix(1, 0))
	})
	defer func() {
		if !stopWatch() {
			<-watchDone
		}
	}()

	t.log.Debug("raft stream from peer open", "peer", from, "remote", r.RemoteAddr)
	fr := newFrameReader(r.Body, t.tune.maxFrame)
	for {
		msgs, err := fr.next()
		if err == nil {
			err = t.check(from, msgs)
		}
		switch {
		case err == nil:
		case in.ctx.Err() != nil:
			t.log.Debug("raft stream from peer closed", "peer", from, "why", "transport closed or a newer stream")
			return
		case errors.Is(err, errMalformed):
			t.log.Error("raft stream from peer closed", "peer", from, "err", err)
			fmt.Fprintf(w, "tabula: %v\n", err)
			return
		case err == io.EOF:
			t.log.Debug("raft stream from peer ended", "peer", from)
			return
		default:
			t.log.Debug("raft stream from peer broke", "peer", from, "err", err)
			return
		}
		if len(msgs) > 0 {
			t.deliver(from, msgs)
		}
	}
}

// check refuses a frame carrying a message not from the stream's sender or
// not to this node: one whose raft ids are not members of those nodes.
func (t *Transport) check(from uint64, msgs []Message) error {
	for i, m := range msgs {
		if NodeOf(m.Raft.GetFrom()) != from || NodeOf(m.Raft.GetTo()) != t.self {
			return fmt.Errorf("%w: message %d of %d is from %d to %d on the stream from %d to %d",
				errMalformed, i, len(msgs), m.Raft.GetFrom(), m.Raft.GetTo(), from, t.self)
		}
	}
	return nil
}

// beginInbound registers a stream from a sender, ending the sender's older
// stream if any. It returns nil if the transport is closed.
func (t *Transport) beginInbound(from uint64) *inbound {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &inbound{from: from, ctx: ctx, cancel: cancel}
	if old := t.inbound[from]; old != nil {
		old.cancel()
	}
	t.inbound[from] = in
	t.inWG.Add(1)
	// The sender is up: a stream to it waiting out a backoff (it was
	// down, or restarting) is opened now, not up to maxBackoff later.
	if p := t.peers[from]; p != nil {
		p.dialNow()
	}
	return in
}

func (t *Transport) endInbound(in *inbound) {
	t.mu.Lock()
	if t.inbound[in.from] == in {
		delete(t.inbound, in.from)
	}
	t.mu.Unlock()
	in.cancel()
	t.inWG.Done()
}
