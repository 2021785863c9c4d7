package job

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/gantry-build/gantry/internal/bincode"
	"github.com/gantry-build/gantry/internal/units"
)

// The wire between the parent and a worker is a stream of frames each way: a
// frame is a uvarint length n (1 to maxFrame) and n bytes, a kind byte and the
// kind's fields, written with internal/bincode (strings and byte strings a uvarint
// length and their bytes, numbers varints, booleans a byte). Hand-written, as the
// parse cache is, because encoding/json's reflection was a tenth of a no-op build's
// CPU; and a stream of length-prefixed frames needs no escaping of what a payload
// holds. The parent sends, on the worker's stdin:
//
//	'p' part     id, data: a shared part, the worker's under id from now on
//	'f' forget   the worker drops every part it holds; ids start again at 0
//	'j' job      ID, action, element, log path, gated, payload, the ids of its parts
//
// and the worker sends one 'm' frame per Message on fd 3.
//
// Shared parts are what repeats from job to job in a worker (a build's staged
// dependencies' descriptions, its project's configuration): a job's Spec.Shared.
// The parent remembers, per worker, which parts (by their bytes) it has sent and
// under which id, and sends a part only to a worker that does not hold it yet;
// the job frame names its parts by id, and the worker gives its handler the
// parts' bytes back in Spec.Shared. Past sharedLimit bytes of parts, the parent
// tells the worker to forget them all and starts again.
const (
	frameMessage = 'm'
	framePart    = 'p'
	frameForget  = 'f'
	frameJob     = 'j'
)

// maxFrame is the largest frame either side reads or writes.
const maxFrame = 64 << 20

// sharedLimit bounds the bytes of shared parts a worker holds, and the parent
// remembers for it: a build's parts are a few hundred bytes per element
// staged, so most projects' fit many times over.
const sharedLimit = 8 << 20

// errOversize is the error of a frame over maxFrame.
func errOversize(n uint64) error {
	return fmt.Errorf("a frame of %d bytes, over the limit of %s (%d bytes)", n, units.Bytes(maxFrame), maxFrame)
}

// errCutOff is the error of a stream that ends inside a frame.
var errCutOff = errors.New("the stream ended in the middle of a frame")

// appendFrame appends the frame whose content (kind byte and fields) is body
// to dst.
func appendFrame(dst, body []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	return append(dst, body...)
}

// readFrame reads one frame's content. It returns io.EOF at the end of the
// stream between frames, errCutOff inside one, errOversize for a length over
// maxFrame (or zero: no frame is empty).
func readFrame(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	switch {
	case err == io.EOF:
		return nil, io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, errCutOff
	case err != nil:
		return nil, fmt.Errorf("reading a frame's length: %w", err)
	case n == 0:
		return nil, errors.New("an empty frame")
	case n > maxFrame:
		return nil, errOversize(n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return nil, fmt.Errorf("%w (%d bytes)", errCutOff, n)
		}
		return nil, err
	}
	return body, nil
}

// bytesField writes a byte string as a bincode string.
func bytesField(w *bincode.Writer, b []byte) {
	w.Uint(uint64(len(b)))
	w.B = append(w.B, b...)
}

// readBytes reads a byte string; an empty one is nil.
func readBytes(r *bincode.Reader) []byte {
	if s := r.Str(); s != "" {
		return []byte(s)
	}
	return nil
}

// messageTypes are the message types by their code on the wire.
var messageTypes = [...]MessageType{MessageStart, MessageStatus, MessageLog, MessageProgress, MessageNotice,
	MessageAvailable, MessageSlotDone, MessageGate, MessageResult}

func messageCode(t MessageType) (byte, bool) {
	for i, mt := range messageTypes {
		if mt == t {
			return byte(i), true
		}
	}
	return 0, false
}

// encodeMessage is m as a frame.
func encodeMessage(m Message) ([]byte, error) {
	code, ok := messageCode(m.Type)
	if !ok {
		return nil, fmt.Errorf("unknown message type %q", m.Type)
	}
	w := bincode.Writer{B: make([]byte, 0, 64+len(m.Text)+len(m.Data))}
	w.B = append(w.B, frameMessage, code)
	w.Int(m.Time.UnixNano())
	w.Str(m.Text)
	w.Str(m.Level)
	w.Int(m.Done)
	w.Int(m.Total)
	bytesField(&w, m.Data)
	w.Str(m.Retire)
	w.Bool(m.Result != nil)
	if res := m.Result; res != nil {
		w.Bool(res.OK)
		w.Str(res.Error)
		w.Bool(res.Temporary)
		w.Bool(res.Skipped)
		bytesField(&w, res.Data)
		w.Int(res.WaitMs)
		w.Int(res.CacheBytes)
	}
	if len(w.B) > maxFrame {
		return nil, errOversize(uint64(len(w.B)))
	}
	return appendFrame(nil, w.B), nil
}

// decodeMessage decodes a message frame's content.
func decodeMessage(body []byte) (Message, error) {
	if len(body) < 2 || body[0] != frameMessage {
		return Message{}, fmt.Errorf("a frame of kind %q where a message was expected", kindOf(body))
	}
	if int(body[1]) >= len(messageTypes) {
		return Message{}, fmt.Errorf("unknown message type %d", body[1])
	}
	r := bincode.NewStringReader(string(body[2:]))
	m := Message{Type: messageTypes[body[1]]}
	m.Time = time.Unix(0, r.Int())
	m.Text = r.Str()
	m.Level = r.Str()
	m.Done = r.Int()
	m.Total = r.Int()
	m.Data = readBytes(r)
	m.Retire = r.Str()
	if r.Bool() {
		res := &Result{}
		res.OK = r.Bool()
		res.Error = r.Str()
		res.Temporary = r.Bool()
		res.Skipped = r.Bool()
		res.Data = readBytes(r)
		res.WaitMs = r.Int()
		res.CacheBytes = r.Int()
		m.Result = res
	}
	return m, finished(r, "message")
}

// finished is the error of a frame read with r: what r met, or bytes left over.
func finished(r *bincode.Reader, what string) error {
	if r.Err != nil {
		return fmt.Errorf("a %s frame: %w", what, r.Err)
	}
	if r.Len() != 0 {
		return fmt.Errorf("a %s frame with %d bytes left over", what, r.Len())
	}
	return nil
}

// kindOf is a frame's kind byte, for errors.
func kindOf(body []byte) string {
	if len(body) == 0 {
		return ""
	}
	return string(body[:1])
}

// sentParts is what the parent has sent a worker of the shared parts: each
// part's id, by its bytes. Only the goroutine giving the worker a job uses it.
type sentParts struct {
	ids   map[string]uint64
	bytes int
	limit int // sharedLimit when 0 (tests set less)
}

// encodeJob is the frames that give spec to a worker holding sent: the parts
// the worker lacks (after a forget frame if sent is full), then the job frame.
// sent is updated.
func (sent *sentParts) encodeJob(spec Spec) ([]byte, error) {
	var out []byte
	need := 0
	for _, part := range spec.Shared {
		if _, ok := sent.ids[part]; !ok {
			need += len(part)
		}
	}
	if sent.ids == nil || sent.bytes+need > cmp.Or(sent.limit, sharedLimit) {
		if len(sent.ids) > 0 {
			out = appendFrame(out, []byte{frameForget})
		}
		sent.ids, sent.bytes = map[string]uint64{}, 0
	}
	w := bincode.Writer{}
	ids := make([]uint64, len(spec.Shared))
	for i, part := range spec.Shared {
		id, ok := sent.ids[part]
		if !ok {
			id = uint64(len(sent.ids))
			w.B = append(w.B[:0], framePart)
			w.Uint(id)
			w.Str(part)
			if len(w.B) > maxFrame {
				return nil, fmt.Errorf("a shared part of its spec: %w", errOversize(uint64(len(w.B))))
			}
			out = appendFrame(out, w.B)
			sent.ids[part], sent.bytes = id, sent.bytes+len(part)
		}
		ids[i] = id
	}
	w.B = append(w.B[:0], frameJob)
	w.Str(spec.ID)
	w.Str(spec.Action)
	w.Str(spec.Element)
	w.Str(spec.LogPath)
	w.Bool(spec.Gated)
	bytesField(&w, spec.Payload)
	w.Uint(uint64(len(ids)))
	for _, id := range ids {
		w.Uint(id)
	}
	if len(w.B) > maxFrame {
		return nil, fmt.Errorf("its spec: %w", errOversize(uint64(len(w.B))))
	}
	return appendFrame(out, w.B), nil
}

// heldParts is the worker's side of sentParts: the parts it holds, by id.
type heldParts []string

// readJob reads frames until a job frame, keeping the parts that come before
// it, and returns the job's spec. It returns io.EOF when the stream ends
// between frames. An error after the job's ID was read names the job.
func (held *heldParts) readJob(r *bufio.Reader) (Spec, error) {
	for {
		body, err := readFrame(r)
		if err != nil {
			return Spec{}, err
		}
		switch body[0] {
		case frameForget:
			if len(body) != 1 {
				return Spec{}, errors.New("a forget frame with content")
			}
			*held = (*held)[:0]
		case framePart:
			r := bincode.NewStringReader(string(body[1:]))
			id := r.Uint()
			part := r.Str()
			if err := finished(r, "part"); err != nil {
				return Spec{}, err
			}
			if id != uint64(len(*held)) {
				return Spec{}, fmt.Errorf("part %d sent where part %d was expected", id, len(*held))
			}
			*held = append(*held, part)
		case frameJob:
			return held.decodeJob(body)
		default:
			return Spec{}, fmt.Errorf("a frame of unknown kind %q", kindOf(body))
		}
	}
}

// decodeJob decodes a job frame's content.
func (held heldParts) decodeJob(body []byte) (Spec, error) {
	r := bincode.NewStringReader(string(body[1:]))
	var spec Spec
	spec.ID = r.Str()
	spec.Action = r.Str()
	spec.Element = r.Str()
	spec.LogPath = r.Str()
	named := r.Err == nil
	spec.Gated = r.Bool()
	spec.Payload = readBytes(r)
	if n := r.Count(); n > 0 {
		spec.Shared = make([]string, n)
		for i := range spec.Shared {
			id := r.Uint()
			if r.Err == nil && id >= uint64(len(held)) {
				return spec, fmt.Errorf("job %s (%s of %s): its spec names part %d, and the worker holds %d", spec.ID, spec.Action, spec.Element, id, len(held))
			}
			if r.Err == nil {
				spec.Shared[i] = held[id]
			}
		}
	}
	if err := finished(r, "job"); err != nil {
		if named {
			return spec, fmt.Errorf("job %s (%s of %s): %w", spec.ID, spec.Action, spec.Element, err)
		}
		return spec, err
	}
	return spec, nil
}
