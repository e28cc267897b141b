package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// msg is a message of one of three groups, told apart by its index.
func msg(from, to, index uint64) Message {
	return Message{Group: 1 + index%3, Raft: &raftpb.Message{
		Type:  raftpb.MessageType_MsgApp.Enum(),
		From:  proto.Uint64(from),
		To:    proto.Uint64(to),
		Term:  proto.Uint64(3),
		Index: proto.Uint64(index),
		Entries: []*raftpb.Entry{{
			Term: proto.Uint64(3), Index: proto.Uint64(index + 1),
			Data: bytes.Repeat([]byte{byte(index)}, int(index%97)),
		}},
	}}
}

func readAll(t testing.TB, b []byte, maxFrame int) (frames [][]Message, err error) {
	fr := newFrameReader(bytes.NewReader(b), maxFrame)
	for {
		msgs, err := fr.next()
		if err == io.EOF {
			return frames, nil
		}
		if err != nil {
			return frames, err
		}
		frames = append(frames, msgs)
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var msgs []Message
	for i := uint64(1); i <= 300; i++ {
		msgs = append(msgs, msg(1, 2, i))
	}
	// The layout: length, count, then messages, each its group and its
	// length before it.
	b, frames, dropped := appendFrames(nil, msgs[:2], MaxFrame)
	if frames != 1 || dropped != nil {
		t.Fatalf("%d frames, dropped %v", frames, dropped)
	}
	m0, _ := proto.Marshal(msgs[0].Raft)
	m1, _ := proto.Marshal(msgs[1].Raft)
	want := binary.BigEndian.AppendUint32(nil, uint32(4+12+len(m0)+12+len(m1)))
	want = binary.BigEndian.AppendUint32(want, 2)
	want = binary.BigEndian.AppendUint64(want, 2) // msg(1, 2, 1)'s group
	want = append(binary.BigEndian.AppendUint32(want, uint32(len(m0))), m0...)
	want = binary.BigEndian.AppendUint64(want, 3)
	want = append(binary.BigEndian.AppendUint32(want, uint32(len(m1))), m1...)
	if !bytes.Equal(b, want) {
		t.Fatalf("frame\n%x\nwant\n%x", b, want)
	}

	for _, maxFrame := range []int{MaxFrame, 1 << 10, 300} {
		big := msg(1, 2, 0)
		big.Raft.Context = make([]byte, maxFrame) // never fits
		in := append(append(append([]Message{}, msgs[:100]...), big), msgs[100:]...)
		b, frames, dropped := appendFrames([]byte("prefix"), in, maxFrame)
		if len(dropped) != 1 || dropped[0].Raft != big.Raft {
			t.Fatalf("max %d: dropped %d messages", maxFrame, len(dropped))
		}
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatal("appendFrames overwrote dst")
		}
		got, err := readAll(t, b[6:], maxFrame)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != frames {
			t.Fatalf("max %d: read %d frames, appendFrames made %d", maxFrame, len(got), frames)
		}
		if maxFrame == MaxFrame && frames != 1 || maxFrame < MaxFrame && frames < 10 {
			t.Fatalf("max %d: %d frames", maxFrame, frames)
		}
		var flat []Message
		for _, f := range got {
			flat = append(flat, f...)
		}
		if len(flat) != len(msgs) {
			t.Fatalf("max %d: %d messages read, %d written", maxFrame, len(flat), len(msgs))
		}
		for i := range flat {
			if flat[i].Group != msgs[i].Group || !proto.Equal(flat[i].Raft, msgs[i].Raft) {
				t.Fatalf("max %d: message %d differs", maxFrame, i)
			}
		}
		// Every frame respects the cap.
		for p := b[6:]; len(p) > 0; {
			n := int(binary.BigEndian.Uint32(p))
			if n > maxFrame {
				t.Fatalf("a frame of %d bytes, max %d", n, maxFrame)
			}
			p = p[4+n:]
		}
	}
	// Nothing to send, or only what cannot be sent: no frame.
	big := msg(1, 2, 0)
	big.Raft.Context = make([]byte, 100)
	if b, frames, _ := appendFrames(nil, []Message{big}, 64); len(b) != 0 || frames != 0 {
		t.Fatalf("%d bytes, %d frames for nothing", len(b), frames)
	}
}

// FuzzFrameReader checks that no input makes the reader panic, and that
// what it accepts re-encodes to the same messages.
func FuzzFrameReader(f *testing.F) {
	good, _, _ := appendFrames(nil, []Message{msg(1, 2, 1), msg(1, 2, 2)}, MaxFrame)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		frames, err := readAll(t, b, 1<<16)
		if err != nil && !errors.Is(err, errMalformed) {
			t.Fatalf("error %v does not wrap errMalformed", err)
		}
		for _, msgs := range frames {
			for _, m := range msgs {
				if m.Raft == nil {
					t.Fatalf("message %v accepted", m)
				}
			}
			// What was accepted re-encodes into a frame read back alike.
			again, err := readAll(t, func() []byte { b, _, _ := appendFrames(nil, msgs, MaxFrame); return b }(), MaxFrame)
			if err != nil || len(msgs) > 0 && len(again) != 1 {
				t.Fatalf("re-encoded frame of %d messages read back as %d frames: %v", len(msgs), len(again), err)
			}
			for i := range again {
				for j, m := range again[i] {
					if m.Group != msgs[j].Group || !proto.Equal(m.Raft, msgs[j].Raft) {
						t.Fatalf("message %d differs after re-encoding", j)
					}
				}
			}
		}
	})
}
