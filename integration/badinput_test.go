package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpp/gateway/gateway"
	"github.com/mcpp/gateway/integration/internal/harness"
	"github.com/mcpp/gateway/wire"
)

// relayedAs is what the gateway relays of a frame that it accepted: the
// sender's bytes after the opening brace, with raw newlines (white space)
// turned into spaces.
func relayedAs(frame []byte) []byte {
	i := bytes.IndexByte(frame, '{')
	return bytes.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, frame[i+1:])
}

// nestArrays is n nested arrays around v.
func nestArrays(n int, v string) string {
	return strings.Repeat("[", n) + v + strings.Repeat("]", n)
}

// A bad-input case: a raw frame and what the gateway must do with it: an
// error code, "ok" (accepted and relayed as sent), or "close 1009".
type badCase struct {
	name   string
	frame  []byte
	binary bool
	want   string
}

const (
	badOK    = "ok"
	badClose = "close 1009"
)

// badInputLimit is --max-message-bytes in TestBadInputCorpus: frames over
// twice it close the connection.
const badInputLimit = 64 << 10

// badInputCorpus is every frame of TestBadInputCorpus. Frames that are
// accepted carry an id "ok-…" so that their relay can be found.
func badInputCorpus(t *testing.T) []badCase {
	const (
		ij = "invalid_json"
		ie = "invalid_envelope"
		ic = "invalid_context"
	)
	s := func(name, frame, want string) badCase { return badCase{name: name, frame: []byte(frame), want: want} }
	// env builds an envelope around one field's raw JSON.
	env := func(field, raw string) string {
		return fmt.Sprintf(`{"id":"x-%s","kind":"chat",%q:%s}`, field, field, raw)
	}
	ctxEnv := func(raw string) string { return `{"id":"x-ctx","kind":"chat","context":` + raw + `}` }
	big := func(n int) string { return harness.Pad(n) }
	metaPad := func(total int) string { // a context of exactly total bytes
		head, tail := `{"id":"big","metadata":{"p":"`, `"}}`
		return head + big(total-len(head)-len(tail)) + tail
	}

	cases := []badCase{
		// Not JSON, or not one JSON object.
		s("empty", ``, ij),
		s("white space only", " \t\r\n ", ij),
		s("bare word", `hello`, ij),
		s("open brace", `{`, ij),
		s("close brace", `}`, ij),
		s("truncated object", `{"kind":"chat"`, ij),
		s("extra brace", `{"kind":"chat"}}`, ij),
		s("trailing garbage", `{"kind":"chat"}x`, ij),
		s("two objects", `{"kind":"chat"}{"kind":"chat"}`, ij),
		s("two lines", "{\"kind\":\"chat\"}\n{\"kind\":\"chat\"}", ij),
		s("trailing comma", `{"kind":"chat",}`, ij),
		s("single quotes", `{'kind':'chat'}`, ij),
		s("unquoted key", `{kind:"chat"}`, ij),
		s("missing colon", `{"kind" "chat"}`, ij),
		s("missing value", `{"kind":}`, ij),
		s("missing comma", `{"kind":"chat" "id":"x"}`, ij),
		s("comment", `{"kind":"chat"/* c */}`, ij),
		s("NaN", `{"kind":"chat","payload":NaN}`, ij),
		s("Infinity", `{"kind":"chat","payload":Infinity}`, ij),
		s("-Infinity", `{"kind":"chat","payload":-Infinity}`, ij),
		s("leading zero", `{"kind":"chat","payload":01}`, ij),
		s("hex number", `{"kind":"chat","payload":0x10}`, ij),
		s("plus sign", `{"kind":"chat","payload":+1}`, ij),
		s("bare fraction", `{"kind":"chat","payload":.5}`, ij),
		s("trailing dot", `{"kind":"chat","payload":1.}`, ij),
		s("empty exponent", `{"kind":"chat","payload":1e}`, ij),
		s("unterminated string", `{"kind":"chat","payload":"abc}`, ij),
		s("bad escape", `{"kind":"chat","payload":"\x41"}`, ij),
		s("short unicode escape", `{"kind":"chat","payload":"\u12"}`, ij),
		s("non-hex unicode escape", `{"kind":"chat","payload":"\uZZZZ"}`, ij),
		s("truncated true", `{"kind":"chat","payload":tru}`, ij),
		s("capital True", `{"kind":"chat","payload":True}`, ij),
		s("number as key", `{1:"chat"}`, ij),
		s("byte order mark", "\xef\xbb\xbf{\"kind\":\"chat\"}", ij),
		s("null", `null`, ij),
		s("true", `true`, ij),
		s("number", `42`, ij),
		s("string", `"chat"`, ij),
		s("empty array", `[]`, ij),
		s("array of envelopes", `[{"kind":"chat"}]`, ij),
		s("raw tab in a string", "{\"kind\":\"ch\tat\"}", ij),
		s("raw newline in a string", "{\"kind\":\"ch\nat\"}", ij),
		s("raw NUL in a string", "{\"kind\":\"chat\",\"payload\":\"a\x00b\"}", ij),
		s("raw NUL after the object", "{\"kind\":\"chat\"}\x00", ij),
		s("raw NUL before the object", "\x00{\"kind\":\"chat\"}", ij),

		// Invalid UTF-8 anywhere is invalid_json (README, Parsing).
		s("UTF-8: 0xff", "{\"kind\":\"chat\",\"payload\":\"\xff\"}", ij),
		s("UTF-8: overlong slash", "{\"kind\":\"chat\",\"payload\":\"\xc0\xaf\"}", ij),
		s("UTF-8: encoded surrogate", "{\"kind\":\"chat\",\"payload\":\"\xed\xa0\x80\"}", ij),
		s("UTF-8: truncated sequence", "{\"kind\":\"chat\",\"payload\":\"\xe2\x82\"}", ij),
		s("UTF-8: above U+10FFFF", "{\"kind\":\"chat\",\"payload\":\"\xf4\x90\x80\x80\"}", ij),
		s("UTF-8: five-byte form", "{\"kind\":\"chat\",\"payload\":\"\xf8\x88\x80\x80\x80\"}", ij),
		s("UTF-8: in a key", "{\"k\xffind\":\"chat\"}", ij),
		s("UTF-8: in kind", "{\"kind\":\"ch\xffat\"}", ij),
		s("UTF-8: in an unknown field", "{\"kind\":\"chat\",\"x\":\"\xfe\"}", ij),

		// Nesting: 10,000 levels in all is valid JSON, deeper is not.
		s("10,000 levels", `{"id":"ok-depth-10000","kind":"chat","payload":`+nestArrays(9999, "1")+`}`, badOK),
		s("10,001 levels", `{"id":"x-depth","kind":"chat","payload":`+nestArrays(10000, "1")+`}`, ij),
		s("10,001 levels of objects", strings.Repeat(`{"a":`, 10001)+"1"+strings.Repeat("}", 10001), ij),
		s("30,000 levels", `{"kind":"chat","payload":`+nestArrays(30000, "")+`}`, ij),
		s("60,000 unclosed levels", `{"kind":"chat","payload":`+strings.Repeat("[", 60000), ij),
		s("10,001 levels in context metadata", ctxEnv(`{"id":"deep","metadata":{"a":`+nestArrays(9998, "")+`}}`), ij),
		s("1,000 levels in context metadata", `{"id":"ok-deep-metadata","kind":"chat","context":{"id":"deep-meta","metadata":{"a":`+nestArrays(1000, "")+`}}}`, badOK),

		// Huge numbers are valid JSON: accepted where a number is.
		s("1e999999 payload", `{"id":"ok-1e999999","kind":"chat","payload":1e999999}`, badOK),
		s("-1e999999 payload", `{"id":"ok--1e999999","kind":"chat","payload":-1e999999}`, badOK),
		s("1e-999999 payload", `{"id":"ok-1e-999999","kind":"chat","payload":1e-999999}`, badOK),
		s("100-digit payload", `{"id":"ok-100-digits","kind":"chat","payload":{"n":`+strings.Repeat("9", 100)+`}}`, badOK),
		s("1e999999 unknown field", `{"id":"ok-unknown-number","kind":"chat","x":1e999999}`, badOK),
		s("1e999999 in context metadata", `{"id":"ok-metadata-number","kind":"chat","context":{"id":"num","metadata":{"n":1e999999}}}`, badOK),
		s("1e999999 as ts", env("ts", `1e999999`), ie),
		s("100-digit id", `{"id":`+strings.Repeat("1", 100)+`,"kind":"chat"}`, ie),

		// Escaped lone surrogates and NULs are valid JSON (README).
		s(`lone \ud800`, `{"id":"ok-ud800","kind":"chat","payload":"\ud800"}`, badOK),
		s(`reversed pair`, `{"id":"ok-reversed-pair","kind":"chat","payload":"\udc00\ud800"}`, badOK),
		s(`lone \udfff in an unknown field`, `{"id":"ok-udfff","kind":"chat","x":"\udfff"}`, badOK),
		s(`lone surrogate in kind`, `{"id":"ok-kind-surrogate","kind":"chat\ud800"}`, badOK),
		s(`\u0000 in payload`, `{"id":"ok-nul-payload","kind":"chat","payload":"a\u0000b"}`, badOK),
		s(`\u0000 in id`, `{"id":"ok-nul\u0000id","kind":"chat"}`, badOK),
		s(`\u0000 in context id`, ctxEnv(`{"id":"a\u0000b"}`), ic),
		s(`\u0007 in context type`, ctxEnv(`{"id":"bell","type":"r\u0007"}`), ic),
		s(`\u0000 in context path`, ctxEnv(`"a/\u0000"`), ic),

		// Every field with the wrong type, or null (only payload may be).
		s("protocol number", env("protocol", `1`), ie),
		s("protocol bool", env("protocol", `true`), ie),
		s("protocol array", env("protocol", `["mcpp/v0.1"]`), ie),
		s("protocol object", env("protocol", `{"v":"mcpp/v0.1"}`), ie),
		s("protocol null", env("protocol", `null`), ie),
		s("id number", `{"id":7,"kind":"chat"}`, ie),
		s("id bool", `{"id":true,"kind":"chat"}`, ie),
		s("id array", `{"id":["a"],"kind":"chat"}`, ie),
		s("id object", `{"id":{},"kind":"chat"}`, ie),
		s("id null", `{"id":null,"kind":"chat"}`, ie),
		s("id empty", `{"id":"","kind":"chat"}`, ie),
		s("ts number", env("ts", `1700000000`), ie),
		s("ts bool", env("ts", `false`), ie),
		s("ts array", env("ts", `[]`), ie),
		s("ts object", env("ts", `{}`), ie),
		s("ts null", env("ts", `null`), ie),
		s("from number", env("from", `1`), ie),
		s("from array", env("from", `["bad"]`), ie),
		s("from object", env("from", `{}`), ie),
		s("from bool", env("from", `true`), ie),
		s("from null", env("from", `null`), ie),
		s("to string", env("to", `"steady"`), ie),
		s("to object", env("to", `{"0":"steady"}`), ie),
		s("to number", env("to", `1`), ie),
		s("to null", env("to", `null`), ie),
		s("to [number]", env("to", `[1]`), ie),
		s("to [null]", env("to", `[null]`), ie),
		s("to [invalid id]", env("to", `["bad id!"]`), ie),
		s("to [empty]", env("to", `[""]`), ie),
		s("to [[id]]", env("to", `[["steady"]]`), ie),
		s("kind number", `{"id":"x","kind":1}`, ie),
		s("kind bool", `{"id":"x","kind":true}`, ie),
		s("kind array", `{"id":"x","kind":["chat"]}`, ie),
		s("kind object", `{"id":"x","kind":{}}`, ie),
		s("kind null", `{"id":"x","kind":null}`, ie),
		s("kind empty", `{"id":"x","kind":""}`, ie),
		s("kind missing", `{"id":"x","payload":{}}`, ie),
		s("empty object", `{}`, ie),
		s("correlation_id number", env("correlation_id", `1`), ie),
		s("correlation_id object", env("correlation_id", `{}`), ie),
		s("correlation_id bool", env("correlation_id", `false`), ie),
		s("correlation_id null", env("correlation_id", `null`), ie),
		s("correlation_id [number]", env("correlation_id", `["a",1]`), ie),
		s("correlation_id [null]", env("correlation_id", `[null]`), ie),
		s("correlation_id [[string]]", env("correlation_id", `[["a"]]`), ie),
		s("context null", ctxEnv(`null`), ie),
		s("context number", ctxEnv(`1`), ic),
		s("context bool", ctxEnv(`true`), ic),
		s("context array", ctxEnv(`["a"]`), ic),
		s("context empty object", ctxEnv(`{}`), ic),
		s("context id number", ctxEnv(`{"id":1}`), ic),
		s("context id null", ctxEnv(`{"id":null}`), ic),
		s("context type number", ctxEnv(`{"id":"a","type":1}`), ic),
		s("context parent array", ctxEnv(`{"id":"a","parent":[]}`), ic),
		s("context metadata array", ctxEnv(`{"id":"a","metadata":[]}`), ic),
		s("context metadata null", ctxEnv(`{"id":"a","metadata":null}`), ic),
		s("context unknown key", ctxEnv(`{"id":"a","color":"red"}`), ic),
		s("context empty path", ctxEnv(`""`), ic),
		s("context path empty segment", ctxEnv(`"a//b"`), ic),
		s("context path with a space", ctxEnv(`"a b"`), ic),
		s("context path leading slash", ctxEnv(`"/a"`), ic),
		s("payload null", `{"id":"ok-payload-null","kind":"chat","payload":null}`, badOK),

		// Duplicate keys (README: a known field twice is invalid_envelope).
		s("kind twice", `{"id":"x","kind":"chat","kind":"chat"}`, ie),
		s("id twice", `{"id":"x","id":"y","kind":"chat"}`, ie),
		s("payload twice", `{"id":"x","kind":"chat","payload":1,"payload":2}`, ie),
		s("kind twice, one escaped", `{"id":"x","kind":"chat","\u006bind":"system/x"}`, ie),
		s("from twice", `{"id":"x","kind":"chat","from":"bad","from":"steady"}`, ie),
		s("context key twice", ctxEnv(`{"id":"a","id":"b"}`), ic),
		s("unknown key twice", `{"id":"ok-unknown-twice","kind":"chat","x":1,"x":2}`, badOK),
		s("duplicate keys in payload", `{"id":"ok-payload-dups","kind":"chat","payload":{"a":1,"a":2}}`, badOK),

		// Field sizes.
		s("id of 128 bytes", `{"id":"ok-`+big(125)+`","kind":"chat"}`, badOK),
		s("id of 129 bytes", `{"id":"`+big(129)+`","kind":"chat"}`, ie),
		s("to id of 129 bytes", env("to", `["`+big(129)+`"]`), ie),
		s("context of 4096 bytes", `{"id":"ok-context-4096","kind":"chat","context":`+metaPad(4096)+`}`, badOK),
		s("context of 4097 bytes", ctxEnv(metaPad(4097)), ic),
		s("context id of 256 bytes", `{"id":"ok-context-id-256","kind":"chat","context":{"id":"`+big(256)+`"}}`, badOK),
		s("context id of 257 bytes", ctxEnv(`{"id":"`+big(257)+`"}`), ic),
		s("context type of 65 bytes", ctxEnv(`{"id":"t65","type":"`+big(65)+`"}`), ic),
		s("context parent of 257 bytes", ctxEnv(`{"id":"p257","parent":"`+big(257)+`"}`), ic),
		s("context path of 257 bytes", ctxEnv(`"`+big(257)+`"`), ic),

		// The first rule of the table wins.
		s("bad protocol and foreign from", `{"id":"x","kind":"system/x","from":"steady","protocol":"mcpp/v9"}`, "unsupported_protocol"),
		s("null kind and bad protocol", `{"id":"x","kind":null,"protocol":"mcpp/v9"}`, ie),
		s("foreign from and system kind", `{"id":"x","kind":"system/x","from":"steady"}`, "auth_violation"),
		s("system kind, oversize", `{"id":"x","kind":"system/x","payload":"`+big(badInputLimit)+`"}`, "reserved_kind"),
		s("oversize, bad context", `{"id":"x","kind":"chat","context":5,"payload":"`+big(badInputLimit)+`"}`, "message_too_large"),
		s("oversize invalid JSON", `{"kind":"chat","payload":"`+big(badInputLimit+100), ij),
	}

	// Message sizes around --max-message-bytes and twice it.
	sized := func(name string, n int, want string) badCase {
		id := "x-size"
		if want == badOK {
			id = "ok-size"
		}
		return badCase{name: name, frame: harness.EnvelopeOfSize(t, id, "chat", n), want: want}
	}
	cases = append(cases,
		sized("exactly the limit", badInputLimit, badOK),
		sized("limit + 1", badInputLimit+1, "message_too_large"),
		sized("twice the limit", 2*badInputLimit, "message_too_large"),
		badCase{name: "binary envelope", frame: []byte(`{"id":"x-bin","kind":"chat"}`), binary: true, want: ij},
		badCase{name: "binary garbage", frame: []byte{0, 1, 2, 0xff, 0xfe}, binary: true, want: ij},
		badCase{name: "binary of 100 KiB", frame: bytes.Repeat([]byte{0xab}, 100<<10), binary: true, want: ij},
		badCase{name: "empty binary", frame: []byte{}, binary: true, want: ij},
	)
	// Frames that close the connection, last.
	cases = append(cases,
		sized("twice the limit + 1", 2*badInputLimit+1, badClose),
		badCase{name: "1,000,000 levels (2 MB)", frame: []byte(nestArrays(1000000, "")), want: badClose},
		badCase{name: "binary of 1 MiB", frame: bytes.Repeat([]byte{'{'}, 1<<20), binary: true, want: badClose},
		sized("10 MB", 10<<20, badClose),
	)
	return cases
}

// TestBadInputCorpus sends every frame of badInputCorpus from one
// participant while a second one receives a steady stream from a third.
// Each bad frame gets its error code and the sender's connection stays
// open (a good envelope after each one is relayed), except the frames over
// twice --max-message-bytes, which close it with 1009; the accepted frames
// are relayed byte for byte; the steady receiver gets every envelope of
// the stream, in order, and of the bad sender's only the accepted ones.
func TestBadInputCorpus(t *testing.T) {
	t.Parallel()
	g := harness.StartGateway(t, func(c *gateway.Config) {
		c.MaxMessageBytes = badInputLimit
		c.MaxContextBytes = 4096
		c.Rate, c.Burst = 1e6, 1000000
		c.ContextCreateRate, c.ContextCreateBurst = 1e6, 1000000
		c.ContextRate, c.ContextBurst = 1e6, 1000000
		c.WriteTimeout = time.Minute
	})
	const pod = "badinput"
	cases := badInputCorpus(t)

	steady := harness.DialPeer(t, g, pod, "steady", "", 1<<17)
	// The stream's sender reads nothing but presence.
	pump := g.Dial(t, pod, "pump", "main=0&contexts=none")
	// The bad sender sees its own envelopes (echo) and not the stream,
	// which is addressed to steady.
	// It sends binary messages too: coder/websocket itself.
	dialBad := func() *harness.Peer {
		p := harness.StartPeer(t, "bad", harness.DialPodWebSocket(t, g.WS, pod, "bad", "echo=1&routing=directed"), 1024)
		if w := p.Expect(); w.Kind != "system/welcome" {
			t.Fatalf("bad: first message is %s, want system/welcome", w.Kind)
		}
		return p
	}
	bad := dialBad()

	stop := make(chan struct{})
	pumped := make(chan int, 1)
	pumpErr := make(chan error, 1)
	go func() {
		n := 0
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				pumped <- n
				return
			case <-tick.C:
			}
			b := fmt.Appendf(nil, `{"id":"p-%d","kind":"chat","to":["steady"],"payload":{"seq":%d}}`, n, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := pump.Conn.Write(ctx, b)
			cancel()
			if err != nil {
				pumpErr <- err
				pumped <- n
				return
			}
			n++
		}
	}()

	var relayed []string // ids steady must get from bad, in order
	counts := map[string]int{}
	for i, tc := range cases {
		counts[tc.want]++
		if tc.want == badClose {
			// The write may fail once the gateway has closed.
			werr := make(chan error, 1)
			go func() { werr <- bad.Write(tc.binary, tc.frame) }()
			if code := bad.WaitClosed(20 * time.Second); code != wire.CloseMessageTooBig {
				t.Fatalf("%s (%d bytes): closed with %d (%v), want 1009", tc.name, len(tc.frame), code, bad.CloseErr())
			}
			select {
			case <-werr:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: the write did not end after the close", tc.name)
			}
			bad = dialBad()
			continue
		}
		if err := bad.Write(tc.binary, tc.frame); err != nil {
			t.Fatalf("%s: write: %v", tc.name, err)
		}
		if tc.want == badOK {
			var want struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(tc.frame, &want); err != nil || !strings.HasPrefix(want.ID, "ok-") {
				t.Fatalf("%s: an accepted case needs an id ok-…: %v", tc.name, err)
			}
			m := bad.ExpectOther()
			if m.Kind == "system/error" {
				t.Fatalf("%s: refused with %s: %s", tc.name, m.ErrCode(), m.Payload)
			}
			if m.ID != want.ID || !bytes.Contains(m.Raw, relayedAs(tc.frame)) {
				t.Fatalf("%s: echo %.300q is not the frame as sent", tc.name, m.Raw)
			}
			relayed = append(relayed, want.ID)
		} else {
			m := bad.ExpectOther()
			if m.ErrCode() != tc.want {
				t.Fatalf("%s: got %s %s %.300s, want system/error %s", tc.name, m.Kind, m.ErrCode(), m.Payload, tc.want)
			}
			if m.From != "system:gateway" || len(m.To) != 1 || m.To[0] != "bad" {
				t.Fatalf("%s: error envelope from %q to %v", tc.name, m.From, m.To)
			}
		}
		// The connection is still open and works.
		good := fmt.Sprintf("good-%d", i)
		if err := bad.Write(false, fmt.Appendf(nil, `{"id":%q,"kind":"chat","payload":{"after":%q}}`, good, tc.name)); err != nil {
			t.Fatalf("after %s: write: %v", tc.name, err)
		}
		if m := bad.ExpectOther(); m.ID != good {
			t.Fatalf("after %s: got %s %s %s, want the echo of %s", tc.name, m.Kind, m.ID, m.Payload, good)
		}
		relayed = append(relayed, good)
	}

	close(stop)
	n := <-pumped
	select {
	case err := <-pumpErr:
		t.Fatalf("the stream's sender failed: %v", err)
	default:
	}
	if err := pump.Conn.Write(context.Background(), []byte(`{"id":"p-end","kind":"chat","to":["steady"]}`)); err != nil {
		t.Fatal(err)
	}

	// steady: the whole stream in order, and of bad's only what was
	// accepted, in order, and nothing else.
	seq, got := 0, 0
	for {
		m := steady.Expect()
		switch {
		case m.Kind == "system/presence":
			continue
		case m.ID == "p-end":
		case m.From == "pump":
			if m.Seq() != seq {
				t.Fatalf("steady: stream envelope %s has seq %d, want %d", m.ID, m.Seq(), seq)
			}
			seq++
			continue
		case m.From == "bad":
			if got >= len(relayed) || m.ID != relayed[got] {
				want := "nothing more"
				if got < len(relayed) {
					want = relayed[got]
				}
				t.Fatalf("steady: got %s from bad, want %s", m.ID, want)
			}
			got++
			continue
		default:
			t.Fatalf("steady: unexpected %s from %s: %.200s", m.Kind, m.From, m.Raw)
		}
		break
	}
	if seq != n || got != len(relayed) {
		t.Fatalf("steady got %d of %d stream envelopes and %d of %d of bad's", seq, n, got, len(relayed))
	}
	t.Logf("%d frames (%d refused, %d accepted, %d closing); steady got all %d stream envelopes in order and the %d accepted ones",
		len(cases), len(cases)-counts[badOK]-counts[badClose], counts[badOK], counts[badClose], n, got)
}
