// Package client is the Go client of the MCPP pod gateway: what an agent,
// a tool or a test imports to take part in a pod. It speaks the protocol
// of docs/protocol.md, whose message shapes are package wire, and keeps
// its user from having to know most of it: it fills ids, splits batches,
// matches answers to requests, and, above all, reconnects after a lost
// connection and resumes where it left off, so that its user sees every
// envelope once, in order.
//
// # Dial
//
// Dial joins a pod and returns once the gateway has welcomed the client:
//
//	c, err := client.Dial(ctx, "ws://127.0.0.1:8080/ws", client.Options{
//		Pod:         "lab",
//		Participant: "alice",            // open mode; a token names you otherwise
//		Token:       os.Getenv("TOKEN"), // sent as Authorization: Bearer
//	})
//	if err != nil {
//		// a *client.RefusedError when the gateway said no:
//		// its StatusCode (401) and Code (wire.CodeUnauthorized)
//	}
//	defer c.Close()
//
// Options also choose the filter (Options.Filter, a wire.Filter: which
// sub-contexts to receive), the pod's past to replay first
// (Options.History, Options.Fold) and how to reconnect
// (Options.Reconnect).
//
// # Send
//
// Send writes one envelope. Only Kind is required: the gateway fills the
// protocol, the time and the sender, and Send fills the id, a UUIDv4
// that it writes into the envelope so that sending it again carries the
// same id:
//
//	id, err := c.Send(ctx, &wire.Envelope{Kind: "chat", Payload: json.RawMessage(`{"text":"hello"}`)})
//
// The gateway answers only refusals, after the fact: they come as
// *GatewayError events whose RefusedID is the id Send returned. Sync waits
// until they all have; when it fails with ErrDisconnected instead, the
// envelopes sent since the last Sync may not have arrived: send them
// again, with the same ids, and a wire.CodeDuplicateID refusal says that
// one had. A Client's methods may be called from several goroutines at
// once.
//
// # Receive
//
// Next returns the next Event (Events is the same as a channel). The
// first is the *Welcome; then come *Message (an envelope of the pod),
// *Presence (someone joined or left), *GatewayError (an envelope you sent
// was refused), *ContextEvent (a context concluded) and *Reconnected:
//
//	for {
//		ev, err := c.Next(ctx)
//		if err != nil {
//			return err // ErrClosed after Close, or why the client ended
//		}
//		switch ev := ev.(type) {
//		case *client.Message:
//			fmt.Println(ev.From, ev.Kind, string(ev.Payload))
//		case *client.GatewayError:
//			log.Printf("%s was refused: %s", ev.RefusedID(), ev.Code)
//		}
//	}
//
// A client that joined with batch=1 receives several envelopes per
// WebSocket message; they come out of Next one by one all the same.
// Events are read ahead into a buffer (Options.EventBuffer); a client
// that does not take them stops reading, and the gateway cuts a
// connection that falls too far behind (4008, then the client
// reconnects and resumes).
//
// # Requests
//
// Request asks the gateway something (docs/protocol.md section 6) and
// returns its answer, matched by correlation_id; a refusal is returned
// as a *GatewayError, which IsCode tests. SetFilter, Contexts and History
// are the typed forms:
//
//	active, err := c.Contexts(ctx, wire.ContextsRequest{Type: "reasoning"})
//	f, err := c.SetFilter(ctx, wire.Filter{Contexts: wire.ContextsNone})
//
// # Publishing without joining
//
// A tool, a webhook or a script that only has something to say, or to
// ask, need not join: Publish sends envelopes with one HTTP request
// (POST /pods/NAME/envelopes, docs/protocol.md section 6), and nobody in
// the pod sees it join or leave. Each result says what became of one
// envelope; ResultError makes a refusal an error:
//
//	res, err := client.Publish(ctx, "http://127.0.0.1:8080", client.PublishOptions{
//		Pod: "lab", Participant: "ci", // open mode needs a participant; a token names it otherwise
//	}, &wire.Envelope{Kind: "chat", Payload: json.RawMessage(`{"text":"build green"}`)})
//	if err == nil {
//		err = client.ResultError(res[0]) // a *GatewayError when refused
//	}
//
// Ask sends one gateway/contexts or gateway/history request the same way
// and returns the answer's payload. PublishRaw sends JSON as it is.
//
// # TLS
//
// A gateway that serves TLS (mcpp-gateway --tls-cert, --tls-key) is
// reached at wss:// (or https://) for Dial and Publish alike. Its
// certificate is checked against the system's roots, which Go reads from
// SSL_CERT_FILE and SSL_CERT_DIR when they are set; a gateway whose
// certificate a private CA signed is trusted with Options.TLSConfig
// (PublishOptions.TLSConfig), the system's roots plus that CA:
//
//	roots, err := x509.SystemCertPool()
//	if err != nil {
//		roots = x509.NewCertPool()
//	}
//	roots.AppendCertsFromPEM(caPEM) // the private CA, PEM
//	c, err := client.Dial(ctx, "wss://gateway.example:8443/ws", client.Options{
//		Pod: "lab", Token: token, TLSConfig: &tls.Config{RootCAs: roots},
//	})
//
// # Sub-contexts
//
// Branch opens a sub-context (a new UUID, a type, a parent); envelopes
// sent with its Context are in it; Conclude concludes it, and everyone
// whose filter admits it receives a *ContextEvent with its statistics:
//
//	r, err := c.Branch(ctx, "reasoning", "", "compare the two plans")
//	c.Send(ctx, &wire.Envelope{Kind: "reasoning/step", Context: r.JSON(), Payload: step})
//	c.Conclude(ctx, r.ID, "plan B is cheaper")
//
// # Reconnecting and resuming
//
// When the connection is lost (the network, a gateway restart, 4008 or
// 1001; not after Close, and not after 4000, which means another
// connection took the participant id), the client dials again, waiting a
// little longer each time, with jitter (Options.Reconnect). It asks the
// gateway to resume after the last envelope it handed out that the pod's
// history keeps (docs/protocol.md section 8), so the envelopes sent while
// it was away follow, none missing and none twice. Then comes a
// *Reconnected event: Resumed false (Gap) says that the gateway could not
// resume, and that envelopes may be missing. Meanwhile Send, Request and
// the others wait for the new connection, as long as their context
// allows; a request whose answer was lost is asked again. A process that
// restarts can resume too: keep the id of the last envelope it handled
// whose InHistory is true, and pass it as Options.Resume.
//
// # The bytes themselves
//
// A program that handles the gateway's bytes itself (a relay that passes
// envelopes on, a load generator that must not spend its CPU decoding, a
// test that checks the exact bytes or sends malformed ones) uses a Conn:
// one connection, dialed as Dial dials, with nothing added. Read returns
// each WebSocket message as the gateway sent it, the welcome first, into a
// buffer it may reuse; Write sends a message as it is; nothing reconnects:
//
//	conn, err := client.DialConn(ctx, "ws://127.0.0.1:8080/ws?batch=1", client.Options{Pod: "lab"})
//	buf, err := conn.Read(ctx, buf[:0]) // envelopes, one per line
//	err = conn.Write(ctx, []byte(`{"kind":"chat","payload":{}}`))
//
// # Errors
//
// Every call that blocks takes a context. Errors wrap their causes (use
// errors.Is and errors.As): *RefusedError for an HTTP refusal of the
// upgrade (or of a publish request), *GatewayError for a system/error,
// *ClosedError for a close code (wrapping ErrReplaced, ErrSlowConsumer,
// ErrGoingAway or ErrTooBig), ErrDisconnected for a connection lost
// without one, ErrClosed after Close. A Conn's Read returns the same
// *ClosedError and ErrDisconnected.
package client
