package history

import (
	"encoding/binary"
	"errors"
)

// A stream message holds one frame (envelope.AppendFrame's bytes, as
// earlier versions of the gateway stored them) or a batch of frames of
// one pod, in their order: the writer packs what a pod accepted while the
// previous message was on its way into one message, so that a busy pod
// costs the stream one message per batch, not one per envelope. A frame
// starts with its version (2); a batch with batchVersion, then the number
// of frames, then each frame's length and bytes.
const batchVersion = 3

// ErrBadBatch is returned for a stream message that is neither a frame
// nor a batch of frames.
var ErrBadBatch = errors.New("history: malformed stream message")

// appendBatch appends the stream message holding the items' frames to
// dst: the frame itself when there is one.
func appendBatch(dst []byte, items []item) []byte {
	if len(items) == 1 {
		return append(dst, items[0].frame...)
	}
	dst = append(dst, batchVersion)
	dst = binary.AppendUvarint(dst, uint64(len(items)))
	for i := range items {
		f := items[i].frame
		dst = binary.AppendUvarint(dst, uint64(len(f)))
		dst = append(dst, f...)
	}
	return dst
}

// batchSize is the size of the stream message appendBatch makes of items.
func batchSize(items []item) int {
	if len(items) == 1 {
		return len(items[0].frame)
	}
	n := 1 + uvarintLen(uint64(len(items)))
	for i := range items {
		n += uvarintLen(uint64(len(items[i].frame))) + len(items[i].frame)
	}
	return n
}

// uvarintLen is the length of v as binary.AppendUvarint writes it.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// Frames calls fn with each frame of a stream message, in order, with its
// place in the message (0 for a message of one frame). The frames share
// data's memory.
func Frames(data []byte, fn func(off int, frame []byte) error) error {
	if len(data) == 0 {
		return ErrBadBatch
	}
	if data[0] != batchVersion {
		return fn(0, data)
	}
	d := data[1:]
	n, k := binary.Uvarint(d)
	if k <= 0 {
		return ErrBadBatch
	}
	d = d[k:]
	for i := 0; uint64(i) < n; i++ {
		size, k := binary.Uvarint(d)
		if k <= 0 || size > uint64(len(d)-k) {
			return ErrBadBatch
		}
		if err := fn(i, d[k:k+int(size)]); err != nil {
			return err
		}
		d = d[k+int(size):]
	}
	return nil
}

// Frame returns the frame at off in a stream message.
func Frame(data []byte, off int) ([]byte, error) {
	var out []byte
	err := Frames(data, func(i int, f []byte) error {
		if i == off {
			out = f
			return errFound
		}
		return nil
	})
	if errors.Is(err, errFound) {
		return out, nil
	}
	if err == nil {
		err = ErrBadBatch
	}
	return nil, err
}

var errFound = errors.New("found")
