package job

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fullMessage is a message with every field set.
func fullMessage(t MessageType) Message {
	return Message{Type: t, Time: time.Unix(1700000000, 123456789), Text: "compiling héllo\x00", Level: "warning",
		Done: -5, Total: 1 << 40, Data: []byte(`{"files":1}`), Retire: "its job panicked",
		Result: &Result{OK: true, Error: "no", Temporary: true, Skipped: true, Data: []byte{0, 1, 2}, WaitMs: 250, CacheBytes: 1 << 33}}
}

// Every message type and field reads back as sent, from a stream of frames, and
// every cut of that stream is an error (errCutOff), never a message or a panic.
func TestMessageRoundTrip(t *testing.T) {
	var stream []byte
	var want []Message
	for _, mt := range messageTypes {
		for _, m := range []Message{fullMessage(mt), {Type: mt, Time: time.Unix(0, 1)}} {
			b, err := encodeMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			stream = append(stream, b...)
			want = append(want, m)
		}
	}
	got, err := readMessages(stream)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].Time.Equal(want[i].Time) {
			t.Errorf("message %d: time %v, want %v", i, got[i].Time, want[i].Time)
		}
		got[i].Time = want[i].Time
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("message %d read back as\n%+v\nwant\n%+v", i, got[i], want[i])
		}
	}
	one, _ := encodeMessage(fullMessage(MessageResult))
	for i := 1; i < len(one); i++ {
		if _, err := readMessages(one[:i]); !errors.Is(err, errCutOff) {
			t.Fatalf("a frame cut at %d of %d bytes: error %v, want %v", i, len(one), err, errCutOff)
		}
	}
}

// readMessages decodes every frame of stream as the parent does.
func readMessages(stream []byte) ([]Message, error) {
	br := bufio.NewReader(bytes.NewReader(stream))
	var out []Message
	for {
		body, err := readFrame(br)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		m, err := decodeMessage(body)
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

// frame is body as a frame.
func frame(body ...byte) []byte { return appendFrame(nil, body) }

// Each malformed stream is refused with its own error.
func TestFrameErrors(t *testing.T) {
	good, _ := encodeMessage(Message{Type: MessageLog, Text: "x"})
	body := good[1:]
	tests := []struct {
		name   string
		stream []byte
		want   string
	}{
		{"truncated length", []byte{0x80}, "the stream ended in the middle of a frame"},
		{"truncated body", good[:len(good)-1], "the stream ended in the middle of a frame (" + strconv.Itoa(len(body)) + " bytes)"},
		{"empty frame", []byte{0}, "an empty frame"},
		{"oversize", binary.AppendUvarint(nil, maxFrame+1), "a frame of 67108865 bytes, over the limit of 64.0 MiB (67108864 bytes)"},
		{"length over 64 bits", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, "reading a frame's length: binary: varint overflows a 64-bit integer"},
		{"unknown message type", frame(frameMessage, byte(len(messageTypes))), "unknown message type 9"},
		{"not a message", frame(frameJob, 0), `a frame of kind "j" where a message was expected`},
		{"bytes left over", frame(append(append([]byte{}, body...), 7)...), "a message frame with 1 bytes left over"},
		{"damaged field", frame(frameMessage, 0, 0, 0x7f), "a message frame: truncated or damaged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readMessages(tt.stream)
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := encodeMessage(Message{Type: "bogus"}); err == nil || err.Error() != `unknown message type "bogus"` {
		t.Errorf("encoding an unknown type: %v", err)
	}
	if _, err := encodeMessage(Message{Type: MessageResult, Result: &Result{Data: make([]byte, maxFrame)}}); err == nil ||
		!strings.Contains(err.Error(), "over the limit of 64.0 MiB (67108864 bytes)") {
		t.Errorf("encoding an oversize result: %v", err)
	}
}

// A worker is sent each shared part once: a later job that shares it names it;
// past the limit the worker is told to forget its parts and is sent them again.
// The worker's side gives every job its parts back, in order.
func TestJobFramesSendSharedPartsOnce(t *testing.T) {
	sent := sentParts{limit: 100}
	var held heldParts
	give := func(spec Spec) []byte {
		t.Helper()
		frames, err := sent.encodeJob(spec)
		if err != nil {
			t.Fatal(err)
		}
		got, err := held.readJob(bufio.NewReader(bytes.NewReader(frames)))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, spec) {
			t.Fatalf("spec read back as\n%+v\nwant\n%+v", got, spec)
		}
		return frames
	}
	config, dep1, dep2 := strings.Repeat("c", 40), strings.Repeat("1", 30), strings.Repeat("2", 20)
	first := give(Spec{ID: "build-1", Action: "build", Element: "a.toml", LogPath: "/l/a.log", Payload: []byte{0, 1, 2}, Gated: true,
		Shared: []string{config, dep1}})
	if !bytes.Contains(first, []byte(config)) || !bytes.Contains(first, []byte(dep1)) {
		t.Fatalf("the first job's frames lack its parts: %q", first)
	}
	second := give(Spec{ID: "build-2", Action: "build", Element: "b.toml", LogPath: "/l/b.log", Shared: []string{dep2, config, dep1}})
	if bytes.Contains(second, []byte(config)) || bytes.Contains(second, []byte(dep1)) || !bytes.Contains(second, []byte(dep2)) {
		t.Fatalf("the second job's frames send again what the worker holds, or lack the new part: %q", second)
	}
	give(Spec{ID: "fetch-3", Action: "fetch", Element: "c.toml", LogPath: "/l/c.log", Payload: []byte(`{}`)})
	// 90 bytes held: a part of 20 more goes over the limit.
	dep3 := strings.Repeat("3", 20)
	third := give(Spec{ID: "build-4", Action: "build", Element: "d.toml", LogPath: "/l/d.log", Shared: []string{config, dep3}})
	if third[1] != frameForget || !bytes.Contains(third, []byte(config)) || len(held) != 2 {
		t.Fatalf("over the limit: frames %q, the worker holds %d parts; want a forget frame and both parts again", third, len(held))
	}
}

// The worker refuses job frames it cannot follow, naming the job once its
// name was read.
func TestJobFrameErrors(t *testing.T) {
	var sent sentParts
	good, err := sent.encodeJob(Spec{ID: "build-1", Action: "build", Element: "a.toml", LogPath: "/l", Shared: []string{"part"}})
	if err != nil {
		t.Fatal(err)
	}
	partFrame, _ := binary.Uvarint(good)
	split := int(partFrame) + 1 // the part frame's length is one byte
	jobOnly := good[split:]
	tests := []struct {
		name   string
		stream []byte
		want   string
	}{
		{"unknown kind", frame('x'), `a frame of unknown kind "x"`},
		{"part out of order", frame(framePart, 1, 0), "part 1 sent where part 0 was expected"},
		{"unknown part", jobOnly, "job build-1 (build of a.toml): its spec names part 0, and the worker holds 0"},
		{"cut off", good[:len(good)-2], "the stream ended in the middle of a frame"},
		{"left over", append(append([]byte{}, good[:split]...), frame(append(append([]byte{}, jobOnly[1:]...), 0)...)...), "job build-1 (build of a.toml): a job frame with 1 bytes left over"},
		{"damaged name", frame(frameJob, 9, 'b'), "a job frame: truncated or damaged"},
		{"forget with content", frame(frameForget, 0), "a forget frame with content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var held heldParts
			_, err := held.readJob(bufio.NewReader(bytes.NewReader(tt.stream)))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
	var held heldParts
	if _, err := held.readJob(bufio.NewReader(bytes.NewReader(nil))); err != io.EOF {
		t.Errorf("an empty stream: %v, want EOF", err)
	}
}

// The decoders never panic, and what they accept encodes back to the same
// frames (the encoding is canonical).
func FuzzDecodeFrames(f *testing.F) {
	m, _ := encodeMessage(fullMessage(MessageResult))
	var sent sentParts
	j, _ := sent.encodeJob(Spec{ID: "build-1", Action: "build", Element: "a.toml", LogPath: "/l", Payload: []byte("p"), Shared: []string{"x", "y"}})
	f.Add(m)
	f.Add(j)
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		if msgs, err := readMessages(data); err == nil {
			var again []byte
			for _, m := range msgs {
				b, err := encodeMessage(m)
				if err != nil {
					t.Fatal(err)
				}
				again = append(again, b...)
			}
			if len(msgs) > 0 && !bytes.Equal(again, data) {
				// Uvarint lengths may be written with redundant bytes; the content must agree.
				if got, err := readMessages(again); err != nil || !reflect.DeepEqual(got, msgs) {
					t.Fatalf("messages %+v re-encoded do not read back: %v", msgs, err)
				}
			}
		}
		var held heldParts
		br := bufio.NewReader(bytes.NewReader(data))
		for {
			if _, err := held.readJob(br); err != nil {
				break
			}
		}
	})
}

// A worker whose messages are corrupt is killed, and its job fails naming the
// job, the element and the problem, as a fault of gantry: not the element's
// failure. One that dies in the middle of a message says so too.
func TestCorruptOrCutMessages(t *testing.T) {
	tests := []struct {
		action string
		want   string
	}{
		{"corrupt", `job corrupt-1 (corrupt of x.toml): a corrupt message from its worker (pid PID, killed): unknown message type 200; job process was killed by signal 9 (killed) without reporting a result (see log LOG): a fault of gantry or the machine, not of x.toml`},
		{"cutoff", `job cutoff-1 (cutoff of x.toml): reading its worker's messages: the stream ended in the middle of a frame (40 bytes); job process exited with status 3 without reporting a result (see log LOG): a fault of gantry or the machine, not of x.toml`},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			p := newPool(t)
			log := t.TempDir() + "/x.log"
			j, err := p.Start(Spec{ID: tt.action + "-1", Action: tt.action, Element: "x.toml", LogPath: log}, nil)
			if err != nil {
				t.Fatal(err)
			}
			out := waitOutcome(t, j)
			want := strings.NewReplacer("PID", strconv.Itoa(j.Pid()), "LOG", log).Replace(tt.want)
			if out.Result.Error != want || out.Result.OK {
				t.Errorf("outcome %+v,\nwant error %q", out, want)
			}
		})
	}
}

// corruptHandler writes a frame of an unknown message type to the parent and
// waits to be killed for it; cutoffHandler writes the start of a frame and dies.
func corruptHandler(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
	_, _ = os.NewFile(messageFD, "msgs").Write(frame(frameMessage, 200))
	<-ctx.Done()
	return Result{}, nil
}

func cutoffHandler(ctx context.Context, spec Spec, r *Reporter) (Result, error) {
	_, _ = os.NewFile(messageFD, "msgs").Write([]byte{40, frameMessage, 1})
	os.Exit(3)
	return Result{}, nil
}

// benchMessages are a no-op build job's messages, as its worker sends them.
func benchMessages() []Message {
	now := time.Now()
	return []Message{{Type: MessageStart, Time: now, Text: "build e1999.toml"},
		{Type: MessageLog, Time: now, Text: "element: e1999.toml, key: 306f4e9c0e330d1045b0f844de13c5d61c3864a310deb1ef1e39263fef7f24af, project: synth"},
		{Type: MessageStatus, Time: now, Text: "staging 15 dependencies"}, {Type: MessageGate, Time: now}, {Type: MessageSlotDone, Time: now},
		{Type: MessageAvailable, Time: now, Data: []byte(`{"files":{"Hash":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","Size":0}}`)},
		{Type: MessageResult, Time: now, Result: &Result{OK: true, CacheBytes: 1234}}}
}

// The worker's encoding and the parent's decoding of a no-op build job's
// messages, as frames and, for comparison, as the JSON lines they were before.
func BenchmarkMessageEncode(b *testing.B) {
	msgs := benchMessages()
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				if _, err := encodeMessage(m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				if _, err := json.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

func BenchmarkMessageDecode(b *testing.B) {
	msgs := benchMessages()
	var frames, lines []byte
	for _, m := range msgs {
		f, _ := encodeMessage(m)
		frames = append(frames, f...)
		l, _ := json.Marshal(m)
		lines = append(append(lines, l...), '\n')
	}
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if got, err := readMessages(frames); err != nil || len(got) != len(msgs) {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			br := bufio.NewReader(bytes.NewReader(lines))
			for {
				line, err := br.ReadBytes('\n')
				if err != nil {
					break
				}
				var m Message
				if err := json.Unmarshal(line, &m); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
