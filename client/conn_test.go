package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/wire"
)

// A Conn sends bytes a Client never would, and hands back the gateway's
// refusal and close codes as the Client's error types.
func TestConnRawBytesAndCloseCodes(t *testing.T) {
	url := startGateway(t, func(c *gateway.Config) { c.MaxMessageBytes = 1024 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	_, err := DialConn(ctx, url, Options{Pod: "bad pod!", Participant: "x"})
	var re *RefusedError
	if !errors.As(err, &re) || re.StatusCode != 400 || re.Code != wire.CodeInvalidPod {
		t.Fatalf("DialConn to an invalid pod: %v, want a 400 %s refusal", err, wire.CodeInvalidPod)
	}

	c, err := DialConn(ctx, url, Options{Pod: "conn", Participant: "raw"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	welcome, err := c.Read(ctx, nil)
	if err != nil || !strings.Contains(string(welcome), `"kind":"system/welcome"`) {
		t.Fatalf("first message: %q, %v; want the welcome", welcome, err)
	}
	if err := c.Write(ctx, []byte(`{"kind":`)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 8)
	buf, err = c.Read(ctx, buf[:0])
	if err != nil || !strings.Contains(string(buf), `"error":"`+string(wire.CodeInvalidJSON)+`"`) {
		t.Fatalf("answer to a truncated envelope: %q, %v; want %s", buf, err, wire.CodeInvalidJSON)
	}
	// Over the read limit (max_message_bytes + 64 KiB here): the gateway
	// closes with 1009.
	if err := c.Write(ctx, []byte(`{"kind":"chat","payload":"`+strings.Repeat("x", 70_000)+`"}`)); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err = c.Read(ctx, nil); err != nil {
			break
		}
	}
	var ce *ClosedError
	if !errors.As(err, &ce) || ce.Code != wire.CloseMessageTooBig || !errors.Is(err, ErrTooBig) {
		t.Fatalf("after an oversized message: %v, want a 1009 *ClosedError", err)
	}

	// Dropped without a close code: ErrDisconnected.
	d, err := DialConn(ctx, url, Options{Pod: "conn", Participant: "dropped"})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.CloseNow()
	if _, err := d.Read(ctx, nil); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Read after CloseNow: %v, want ErrDisconnected", err)
	}
}
