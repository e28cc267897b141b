package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The stream's body is a sequence of frames (docs/transport.md):
//
//	frame   = length:uint32 payload            (length = len(payload) <= MaxFrame)
//	payload = count:uint32 message{count}
//	message = group:uint64 length:uint32 raftpb.Message (proto-marshalled)
//
// All integers are big-endian. Raft groups are numbered from 1; group 0
// carries the nodes' own messages (liveness).
const (
	// MaxFrame caps a frame's payload. A receiver closes a stream that
	// announces a larger frame; a sender splits a batch that would not fit.
	MaxFrame = 64 << 20
	// MaxMessage caps one marshalled message: the largest that fits alone
	// in a frame. A sender drops (and logs) a larger message.
	MaxMessage = MaxFrame - countField - messageHeader
)

// The fixed parts of a frame and of each message in it.
const (
	countField    = 4              // a payload's count
	frameHeader   = 4 + countField // a frame's length, its payload's count
	messageHeader = 8 + 4          // a message's group, its length
)

// Message is a raft message and the raft group it belongs to: every group
// of a node shares the node's streams. Group 0 is the node's own: a node
// proves it is alive to its peers with a heartbeat there, however many of
// its groups are quiet.
type Message struct {
	Group uint64
	Raft  *raftpb.Message
}

// nodeBits is how many low bits of a raft id name its node.
const nodeBits = 32

// MaxNodeID is the largest node id: a raft id's low 32 bits name its node.
const MaxNodeID = 1<<nodeBits - 1

// NodeOf returns the node whose member a raft id names. In the system
// group and in group 0 a member's raft id is its node's id; in a range
// group the high 32 bits tell apart the members a node has had there
// over time (ReplicaID), so that a member added again after its removal
// is never taken for the old one.
func NodeOf(raftID uint64) uint64 { return raftID & MaxNodeID }

// ReplicaID returns the raft id of a node's member of a range group that
// incarnation tells apart from the node's earlier members there; a
// group's founding members have incarnation 0, so their raft id is their
// node's id.
func ReplicaID(node, incarnation uint64) uint64 {
	return node&MaxNodeID | incarnation<<nodeBits
}

// Incarnation returns what ReplicaID was given.
func Incarnation(raftID uint64) uint64 { return raftID >> nodeBits }

// errMalformed is wrapped by every error that means the peer sent bytes that
// are not a valid stream.
var errMalformed = errors.New("malformed raft frame")

// appendFrames appends to dst the frames carrying msgs in order, each with a
// payload of at most maxFrame bytes, and returns the extended buffer, the
// number of frames appended and the messages left out because alone they
// would not fit in a frame (or do not marshal).
func appendFrames(dst []byte, msgs []Message, maxFrame int) (out []byte, frames int, dropped []Message) {
	start := -1 // offset of the open frame's header
	count := 0
	closeFrame := func(end int) {
		binary.BigEndian.PutUint32(dst[start:], uint32(end-start-4))
		binary.BigEndian.PutUint32(dst[start+4:], uint32(count))
		frames++
	}
	var header [frameHeader]byte
	for _, m := range msgs {
		if start < 0 {
			start, count = len(dst), 0
			dst = append(dst, header[:]...)
		}
		at := len(dst)
		dst = binary.BigEndian.AppendUint64(dst, m.Group)
		dst = append(dst, 0, 0, 0, 0)
		var err error
		dst, err = proto.MarshalOptions{}.MarshalAppend(dst, m.Raft)
		n := len(dst) - at - messageHeader
		if err != nil || n > maxFrame-countField-messageHeader {
			dst = dst[:at]
			dropped = append(dropped, m)
			continue
		}
		binary.BigEndian.PutUint32(dst[at+8:], uint32(n))
		if len(dst)-start-4 > maxFrame {
			// Close the open frame before m and open a new one for m:
			// shift m's bytes right by a frame header.
			dst = append(dst, header[:]...)
			copy(dst[at+frameHeader:], dst[at:len(dst)-frameHeader])
			closeFrame(at)
			start, count = at, 0
		}
		count++
	}
	if start >= 0 {
		if count == 0 {
			dst = dst[:start] // every message of the last frame was dropped
		} else {
			closeFrame(len(dst))
		}
	}
	return dst, frames, dropped
}

// frameReader reads frames from a stream's body.
type frameReader struct {
	r        *bufio.Reader
	buf      []byte
	maxFrame int
}

func newFrameReader(r io.Reader, maxFrame int) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10), maxFrame: maxFrame}
}

// next returns the messages of the next frame. It returns io.EOF at a clean
// end of the stream (between frames), an error wrapping errMalformed if the
// bytes are not a frame, and the reader's error otherwise.
func (fr *frameReader) next() ([]Message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: the stream ends inside a frame header", errMalformed)
		}
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > fr.maxFrame {
		return nil, fmt.Errorf("%w: a frame of %d bytes (at most %d)", errMalformed, n, fr.maxFrame)
	}
	if n < 4 {
		return nil, fmt.Errorf("%w: a frame of %d bytes has no count", errMalformed, n)
	}
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n)
	}
	p := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%w: the stream ends inside a frame of %d bytes", errMalformed, n)
		}
		return nil, err
	}
	if cap(fr.buf) > 1<<20 {
		fr.buf = nil // do not keep a large frame's buffer for the life of the stream
	}
	count := int(binary.BigEndian.Uint32(p))
	p = p[4:]
	if count > len(p)/messageHeader {
		return nil, fmt.Errorf("%w: a frame of %d bytes announces %d messages", errMalformed, n, count)
	}
	msgs := make([]Message, count)
	for i := range msgs {
		if len(p) < messageHeader {
			return nil, fmt.Errorf("%w: message %d of %d is missing", errMalformed, i, count)
		}
		g := binary.BigEndian.Uint64(p)
		l := int(binary.BigEndian.Uint32(p[8:]))
		p = p[messageHeader:]
		if l > len(p) {
			return nil, fmt.Errorf("%w: message %d of %d has %d bytes, the frame %d left", errMalformed, i, count, l, len(p))
		}
		m := new(raftpb.Message)
		if err := proto.Unmarshal(p[:l], m); err != nil {
			return nil, fmt.Errorf("%w: message %d of %d: %v", errMalformed, i, count, err)
		}
		msgs[i] = Message{Group: g, Raft: m}
		p = p[l:]
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last of %d messages", errMalformed, len(p), count)
	}
	return msgs, nil
}
