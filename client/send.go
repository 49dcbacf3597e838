package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/mcpp/gateway/wire"
)

// Send sends one envelope to the pod and returns its id. An envelope
// without an ID gets a new UUIDv4, written into env.ID, so that sending
// the same *wire.Envelope again carries the same id: when the first try
// got through, the gateway refuses the second with wire.CodeDuplicateID
// (docs/protocol.md section 8) rather than relay it twice. Leave
// Protocol, TS and From empty: the gateway fills them.
//
// Send returns once the envelope is written. The gateway answers only a
// refusal, later, as a *GatewayError event whose RefusedID is this id; use
// Sync to wait until every refusal of what you sent has come. An
// envelope without a Trace carries the span ctx carries (trace.go). While the
// client reconnects, Send waits for the new connection, as long as ctx
// allows. When the connection breaks under the write, Send writes the
// envelope again on the next one, and a duplicate_id answer to that
// second try is dropped (the first got through). A ctx that ends in the
// middle of a write closes the connection, which the client then
// reconnects.
func (c *Client) Send(ctx context.Context, env *wire.Envelope) (string, error) {
	if env == nil {
		return "", errors.New("client: send: nil envelope")
	}
	id, err := c.send(ctx, env)
	if err != nil {
		return id, fmt.Errorf("client: send %s: %w", id, err)
	}
	return id, nil
}

// send is Send with its errors unadorned.
func (c *Client) send(ctx context.Context, env *wire.Envelope) (string, error) {
	if env == nil {
		return "", errors.New("nil envelope")
	}
	if env.ID == "" {
		env.ID = uuid.NewString()
	}
	withTrace(ctx, env) // the caller's span, when ctx carries one (trace.go)
	b, err := json.Marshal(env)
	if err != nil {
		return env.ID, err
	}
	_, err = c.write(ctx, env.ID, b, true)
	return env.ID, err
}

// write writes one message on the live connection, waiting for one if
// need be, and again on the next connection when the write fails with a
// lost connection. It returns the connection that took it.
func (c *Client) write(ctx context.Context, id string, b []byte, dedupe bool) (*conn, error) {
	again := false
	for {
		cn, err := c.waitConn(ctx)
		if err != nil {
			return nil, err
		}
		if again && dedupe {
			c.markResent(id)
		}
		err = cn.Write(ctx, b)
		if err == nil {
			return cn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The connection broke under the write: the gateway may or may
		// not have the message. Make sure the reader sees it end, and try
		// on the next one.
		_ = cn.CloseNow()
		select {
		case <-cn.down:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		again = true
	}
}

// Request sends a request to the gateway (a gateway/* kind,
// docs/protocol.md section 6: wire.RequestFilter, wire.RequestContexts,
// wire.RequestHistory) with payload in JSON, and returns the gateway's
// answer: the envelope whose correlation_id is the request's id. A refusal
// (a system/error about it) is returned as a *GatewayError. Answers are not
// kept in the pod's history, so when the connection is lost before the
// answer comes, Request asks again on the next one. SetFilter, Contexts
// and History are Request with typed payloads.
func (c *Client) Request(ctx context.Context, kind string, payload any) (*wire.Envelope, error) {
	if !strings.HasPrefix(kind, "gateway/") {
		return nil, fmt.Errorf("client: request %s: Request is for gateway/* kinds; send other envelopes with Send", kind)
	}
	env, err := wire.NewEnvelope(kind, payload)
	if err != nil {
		return nil, fmt.Errorf("client: request %s: %w", kind, err)
	}
	if env.Payload == nil {
		env.Payload = json.RawMessage("{}")
	}
	env.ID = uuid.NewString()
	ans, _, err := c.roundTrip(ctx, env, true)
	if err != nil {
		return nil, fmt.Errorf("client: request %s: %w", kind, err)
	}
	if ans.Kind == wire.KindError {
		ge := &GatewayError{Envelope: ans}
		if err := ans.DecodePayload(&ge.ErrorPayload); err != nil {
			return nil, fmt.Errorf("client: request %s: %w", kind, err)
		}
		return nil, fmt.Errorf("client: request %s: %w", kind, ge)
	}
	return ans, nil
}

// roundTrip writes env and waits for the gateway's answer. With retry,
// it asks again on the next connection when the connection is lost
// first; without, it returns the connection it asked on and
// ErrDisconnected.
func (c *Client) roundTrip(ctx context.Context, env *wire.Envelope, retry bool) (*wire.Envelope, *conn, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan *wire.Envelope, 1)
	c.mu.Lock()
	c.pending[env.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, env.ID)
		c.mu.Unlock()
	}()
	for {
		cn, err := c.write(ctx, env.ID, b, false)
		if err != nil {
			return nil, nil, err
		}
		select {
		case ans := <-ch:
			return ans, cn, nil
		case <-cn.down:
			select {
			case ans := <-ch: // it came before the connection ended
				return ans, cn, nil
			default:
			}
			if !retry {
				return nil, cn, fmt.Errorf("%w before the gateway answered", ErrDisconnected)
			}
			c.mu.Lock()
			c.pending[env.ID] = ch // answer removed it only if it came
			c.mu.Unlock()
		case <-ctx.Done():
			return nil, cn, ctx.Err()
		}
	}
}

// SetFilter changes the client's filter (gateway/filter, docs/protocol.md
// section 4): fields of f left nil or empty keep their value. It returns
// the filter now in effect, which applies to every envelope accepted after
// it and is kept across reconnections.
func (c *Client) SetFilter(ctx context.Context, f wire.Filter) (wire.Filter, error) {
	ans, err := c.Request(ctx, wire.RequestFilter, f)
	if err != nil {
		return wire.Filter{}, err
	}
	var out wire.Filter
	return out, ans.DecodePayload(&out)
}

// Contexts lists the pod's contexts (gateway/contexts, docs/protocol.md
// section 6); the zero request lists the active ones.
func (c *Client) Contexts(ctx context.Context, q wire.ContextsRequest) ([]wire.ContextInfo, error) {
	ans, err := c.Request(ctx, wire.RequestContexts, q)
	if err != nil {
		return nil, err
	}
	var out wire.ContextsAnswer
	return out.Contexts, ans.DecodePayload(&out)
}

// History reads a page of the pod's history (gateway/history,
// docs/protocol.md sections 6 and 8): the envelopes the client's filter
// admits, oldest first.
func (c *Client) History(ctx context.Context, q wire.HistoryRequest) (*wire.HistoryAnswer, error) {
	ans, err := c.Request(ctx, wire.RequestHistory, q)
	if err != nil {
		return nil, err
	}
	var out wire.HistoryAnswer
	if err := ans.DecodePayload(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Sync waits until the gateway has handled every envelope sent before it
// on the current connection: it sends a request that changes nothing
// and waits for the answer, which the gateway writes after the refusals of
// what came before. When Sync returns nil, every *GatewayError about those
// envelopes is already among the events. When the connection is lost
// first, Sync returns an error wrapping ErrDisconnected: envelopes sent
// just before may not have arrived; Send them again (the same ids) to be
// sure.
func (c *Client) Sync(ctx context.Context) error {
	env := &wire.Envelope{ID: uuid.NewString(), Kind: wire.RequestFilter, Payload: json.RawMessage("{}")}
	if _, _, err := c.roundTrip(ctx, env, false); err != nil {
		return fmt.Errorf("client: sync: %w", err)
	}
	return nil // any answer, a refusal too, comes after what came before
}

// Branch opens a sub-context (docs/protocol.md sections 3 and 9): it sends
// a context/branch envelope with payload {"description": description} in
// a new context whose id is a new UUID, of type typ ("reasoning" when
// empty) and with parent as its parent ("" for a root). It returns the
// context, to send more envelopes in it (Context: ctx.JSON()) and to
// Conclude it.
func (c *Client) Branch(ctx context.Context, typ, parent, description string) (wire.Context, error) {
	if typ == "" {
		typ = "reasoning"
	}
	wc := wire.Context{ID: uuid.NewString(), Type: typ, Parent: parent}
	env, err := wire.NewEnvelope(wire.KindContextBranch, wire.Branch{Description: description})
	if err != nil {
		return wire.Context{}, fmt.Errorf("client: branch: %w", err)
	}
	env.Context = wc.JSON()
	if id, err := c.send(ctx, env); err != nil {
		return wire.Context{}, fmt.Errorf("client: branch %s: send %s: %w", wc.ID, id, err)
	}
	return wc, nil
}

// Conclude concludes a context: it sends a conclusion envelope with
// payload {"summary": summary} in it (docs/protocol.md sections 3 and 9).
// Everyone whose filter admits the context then receives the conclusion
// and a *ContextEvent with the context's statistics. It returns the
// conclusion's id.
func (c *Client) Conclude(ctx context.Context, contextID, summary string) (string, error) {
	env, err := wire.NewEnvelope(wire.KindConclusion, wire.Conclusion{Summary: summary})
	if err != nil {
		return "", fmt.Errorf("client: conclude %s: %w", contextID, err)
	}
	env.Context = wire.Context{ID: contextID}.JSON()
	id, err := c.send(ctx, env)
	if err != nil {
		return id, fmt.Errorf("client: conclude %s: send %s: %w", contextID, id, err)
	}
	return id, nil
}
