package integration

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/integration/internal/harness"
)

// TestUpgradeWithFirstFrameInSameWrite sends the upgrade request and a
// first WebSocket frame in one TCP write, as a fast client may: the frame
// must not be lost in the hand-over from the HTTP server to the WebSocket
// connection.
func TestUpgradeWithFirstFrameInSameWrite(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, nil)
	bob := g.Dial(t, "early", "bob", "")
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := "GET /ws?pod=early&participant=alice HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
	payload := []byte(`{"kind":"chat","payload":{"n":1}}`)
	frame := []byte{0x81, 0x80 | byte(len(payload)), 0, 0, 0, 0}
	_, _ = rand.Read(frame[2:6])
	mask := binary.BigEndian.Uint32(frame[2:6])
	for i, c := range payload {
		frame = append(frame, c^byte(mask>>(24-8*(i%4))))
	}
	if _, err := conn.Write(append([]byte(req), frame...)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	bob.ExpectKind("system/presence")
	if m := bob.ExpectKind("chat"); m.Str("from") != "alice" {
		t.Fatalf("got %v", m)
	}
}
