package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/mcpp/gateway/wire"
)

// Errors the client returns, to test with errors.Is. The close codes of
// the gateway (docs/protocol.md section 5) come as a *ClosedError that
// wraps one of ErrReplaced, ErrSlowConsumer, ErrGoingAway, ErrTooBig,
// ErrTokenExpired, ErrRevoked, ErrKicked and ErrOrderLost.
var (
	// ErrClosed: Close was called.
	ErrClosed = errors.New("client: closed")
	// ErrReplaced: another connection joined the pod with the same
	// participant id, and the gateway closed this one (4000). The client
	// does not reconnect, or the two would replace each other forever.
	ErrReplaced = errors.New("another connection joined the pod with the same participant id (close 4000 replaced)")
	// ErrSlowConsumer: the client read too slowly and the gateway's send
	// queue for it filled (4008). Read events faster, or filter more.
	ErrSlowConsumer = errors.New("this connection read too slowly and the gateway's send queue for it filled (close 4008 slow consumer)")
	// ErrGoingAway: the gateway is shutting down (1001).
	ErrGoingAway = errors.New("the gateway is shutting down (close 1001 going away)")
	// ErrTooBig: a message was over twice the gateway's max_message_bytes
	// (1009).
	ErrTooBig = errors.New("a message was over twice the gateway's size limit (close 1009 message too big)")
	// ErrTokenExpired: the token expired and no fresh one came first
	// (Refresh) (4401). The client does not reconnect: dial again with a
	// fresh token.
	ErrTokenExpired = errors.New("the token expired and was not refreshed (close 4401 token expired)")
	// ErrRevoked: the token was revoked (4403). The client does not
	// reconnect.
	ErrRevoked = errors.New("the token was revoked (close 4403 revoked)")
	// ErrKicked: a participant holding gateway/kick removed this one from
	// the pod (4410). The client does not reconnect: the kick may come
	// with a ban, and would mean nothing if it came straight back.
	ErrKicked = errors.New("removed from the pod by a moderator (close 4410 kicked)")
	// ErrOrderLost: the gateway node lost the pod's order (4503); the
	// client reconnects and resumes.
	ErrOrderLost = errors.New("the gateway node lost the pod's order (close 4503 order lost)")
	// ErrDisconnected: the connection ended without a close code from the
	// gateway (the network, a proxy, a crash).
	ErrDisconnected = errors.New("the connection was lost")
)

// ClosedError is a connection the gateway closed with a close code
// (docs/protocol.md section 5). It wraps the sentinel of each code the
// gateway sends (ErrReplaced, ErrKicked…).
type ClosedError struct {
	Code   wire.CloseCode
	Reason string // the close frame's reason, as sent
	err    error
}

func (e *ClosedError) Error() string {
	s := "the gateway closed the connection: "
	if e.err != nil {
		s += e.err.Error()
	} else {
		s += fmt.Sprintf("close %d", int(e.Code))
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns the sentinel of the close code, if it has one.
func (e *ClosedError) Unwrap() error { return e.err }

// closeError describes how a connection ended, from the error its read
// returned.
func closeError(err error) error {
	var done *ClosedError
	switch {
	case err == nil:
		return ErrDisconnected
	case errors.As(err, &done), errors.Is(err, ErrDisconnected):
		return err // already described
	}
	code := websocket.CloseStatus(err)
	if code == -1 {
		return fmt.Errorf("%w: %w", ErrDisconnected, err)
	}
	ce := &ClosedError{Code: wire.CloseCode(code)}
	var wce websocket.CloseError
	if errors.As(err, &wce) {
		ce.Reason = wce.Reason
	}
	switch ce.Code {
	case wire.CloseReplaced:
		ce.err = ErrReplaced
	case wire.CloseSlowConsumer:
		ce.err = ErrSlowConsumer
	case wire.CloseGoingAway:
		ce.err = ErrGoingAway
	case wire.CloseMessageTooBig:
		ce.err = ErrTooBig
	case wire.CloseTokenExpired:
		ce.err = ErrTokenExpired
	case wire.CloseRevoked:
		ce.err = ErrRevoked
	case wire.CloseKicked:
		ce.err = ErrKicked
	case wire.CloseOrderLost:
		ce.err = ErrOrderLost
	}
	return ce
}

// RefusedError is an upgrade the gateway refused with an HTTP answer
// (docs/protocol.md section 1): Dial returns it, and so does a client
// whose reconnection is refused for good. Publish and Ask return it too,
// for a publish request the gateway refused as a whole (section 6: the
// same codes and statuses as the upgrade's, and 400 invalid_json for a
// body it cannot read).
type RefusedError struct {
	StatusCode int       // 400, 401, 403, 503…
	Code       wire.Code // the body's error: wire.CodeUnauthorized…; "" when the body was not the gateway's JSON
	Message    string    // the body's message, or the body itself
	publish    bool      // a publish request, not an upgrade
}

func (e *RefusedError) Error() string {
	what := "connection"
	if e.publish {
		what = "request"
	}
	s := fmt.Sprintf("the gateway refused the %s: HTTP %d", what, e.StatusCode)
	if e.Code != "" {
		s += " " + string(e.Code)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Temporary reports whether the same upgrade may succeed later: 503
// over_capacity (a cap that frees up, a gateway restarting), and other
// server errors, or 429. Refusals of the request itself (400, 401, 403)
// are not.
func (e *RefusedError) Temporary() bool {
	return e.StatusCode >= 500 || e.StatusCode == http.StatusTooManyRequests || e.Code.Retryable()
}

func refusal(status int, body []byte) *RefusedError {
	e := &RefusedError{StatusCode: status}
	var r wire.Refusal
	if json.Unmarshal(body, &r) == nil && r.Code != "" {
		e.Code, e.Message = r.Code, r.Message
	} else {
		e.Message = strings.TrimSpace(string(body))
	}
	return e
}

// GatewayError is a system/error: the gateway refused an envelope and did
// not relay it (docs/protocol.md section 5). Request returns one when its
// request was refused; an envelope you Send that is refused comes as a
// *GatewayError event, whose CorrelationID is the envelope's id (the
// connection stays open either way). Its fields are the payload's: Code,
// Message, Retryable, RetryAfterMS, and the details.
type GatewayError struct {
	Envelope *wire.Envelope
	wire.ErrorPayload
	// Raw is the system/error as the gateway sent it, when it came as an
	// event; nil for the refusal of a Request or of a publish (Ask,
	// ResultError).
	Raw []byte
}

func (e *GatewayError) Error() string {
	s := "the gateway refused "
	if e.Envelope != nil && len(e.Envelope.CorrelationID) > 0 {
		s += "envelope " + strings.Join(e.Envelope.CorrelationID, ",")
	} else {
		s += "an envelope"
	}
	return s + ": " + e.ErrorPayload.String()
}

// RefusedID is the id of the envelope the error is about, or "" when the
// refused envelope had none (a message that was not JSON).
func (e *GatewayError) RefusedID() string {
	if e.Envelope == nil || len(e.Envelope.CorrelationID) == 0 {
		return ""
	}
	return e.Envelope.CorrelationID[0]
}

// IsCode reports whether err is (or wraps) a *GatewayError or a
// *RefusedError with this code.
func IsCode(err error, code wire.Code) bool {
	var ge *GatewayError
	if errors.As(err, &ge) && ge.Code == code {
		return true
	}
	var re *RefusedError
	return errors.As(err, &re) && re.Code == code
}

// redactedError hides a token given in a URL's query from an error's text.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func redact(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "REDACTED")
		}
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}
