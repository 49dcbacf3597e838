package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/gateway/gatewaytest"
	"github.com/mcpp/gateway/wire"
)

// gatewayURL is where the examples find a gateway: TestMain starts one
// for them.
var gatewayURL = "ws://127.0.0.1:8080/ws"

func TestMain(m *testing.M) {
	s, stop, err := gatewaytest.Serve(gatewaytest.Config())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gatewayURL = s.WS
	code := m.Run()
	stop()
	os.Exit(code)
}

// Two participants of one pod: alice sends, bob receives.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	alice, err := client.Dial(ctx, gatewayURL, client.Options{Pod: "example", Participant: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	defer alice.Close()
	bob, err := client.Dial(ctx, gatewayURL, client.Options{Pod: "example", Participant: "bob"})
	if err != nil {
		log.Fatal(err)
	}
	defer bob.Close()

	_, err = alice.Send(ctx, &wire.Envelope{Kind: "chat", Payload: json.RawMessage(`{"text":"hello"}`)})
	if err != nil {
		log.Fatal(err)
	}
	for {
		ev, err := bob.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		switch ev := ev.(type) {
		case *client.Welcome:
			fmt.Printf("bob joined pod %s, where %s is\n", ev.Pod, ev.Participants[0].ID)
		case *client.Message:
			fmt.Printf("%s sent %s: %s\n", ev.From, ev.Kind, ev.Payload)
			return
		}
	}
	// Output:
	// bob joined pod example, where alice is
	// alice sent chat: {"text":"hello"}
}

// A refused upgrade says why, with the HTTP status and the gateway's code.
func ExampleRefusedError() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := client.Dial(ctx, gatewayURL, client.Options{Pod: "not a pod name!"})
	var refused *client.RefusedError
	if errors.As(err, &refused) {
		fmt.Println(refused.StatusCode, refused.Code)
	}
	// Output:
	// 400 invalid_pod
}

// Requests to the gateway return its answer; a refusal is an error
// carrying the gateway's code.
func ExampleClient_Request() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Dial(ctx, gatewayURL, client.Options{Pod: "example-requests", Participant: "carol"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	r, err := c.Branch(ctx, "reasoning", "", "which plan?")
	if err != nil {
		log.Fatal(err)
	}
	// The gateway handles one connection's envelopes in order, so the
	// context exists by the time it answers.
	list, err := c.Contexts(ctx, wire.ContextsRequest{ID: r.ID})
	if err != nil {
		log.Fatal(err)
	}
	for _, info := range list {
		fmt.Println(*info.Type, info.State, info.Creator, info.Messages)
	}

	_, err = c.Request(ctx, "gateway/unknown", nil)
	fmt.Println(client.IsCode(err, wire.CodeUnknownRequest))
	// Output:
	// reasoning active carol 1
	// true
}

// A sub-context: opened with Branch, concluded with Conclude; everyone
// who sees the context then gets its statistics.
func ExampleClient_Branch() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	alice, err := client.Dial(ctx, gatewayURL, client.Options{Pod: "example-contexts", Participant: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	defer alice.Close()
	bob, err := client.Dial(ctx, gatewayURL, client.Options{Pod: "example-contexts", Participant: "bob"})
	if err != nil {
		log.Fatal(err)
	}
	defer bob.Close()

	r, err := alice.Branch(ctx, "reasoning", "", "compare the two plans")
	if err != nil {
		log.Fatal(err)
	}
	step := json.RawMessage(`{"text":"plan B needs no new hardware"}`)
	if _, err := alice.Send(ctx, &wire.Envelope{Kind: "reasoning/step", Context: r.JSON(), Payload: step}); err != nil {
		log.Fatal(err)
	}
	if _, err := alice.Conclude(ctx, r.ID, "plan B"); err != nil {
		log.Fatal(err)
	}

	for ev := range bob.Events() {
		switch ev := ev.(type) {
		case *client.Message:
			fmt.Println(ev.Kind)
		case *client.ContextEvent:
			fmt.Printf("%s (%s): %d envelopes from %v\n", ev.Event, ev.Reason, ev.Stats.Messages, ev.Stats.Participants)
			return
		}
	}
	// Output:
	// context/branch
	// reasoning/step
	// conclusion
	// concluded (conclusion): 3 envelopes from [alice]
}

// A participant that comes back picks up where it left off: it passes
// the id of the last envelope it handled, and the gateway replays what it
// missed. (Within one client this is automatic: see Reconnected.)
func ExampleOptions_resume() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	alice, err := client.Dial(ctx, gatewayURL, client.Options{Pod: "example-resume", Participant: "alice"})
	if err != nil {
		log.Fatal(err)
	}
	defer alice.Close()
	say := func(text string) {
		p, _ := json.Marshal(map[string]string{"text": text})
		if _, err := alice.Send(ctx, &wire.Envelope{Kind: "chat", Payload: p}); err != nil {
			log.Fatal(err)
		}
	}

	bob, err := client.Dial(ctx, gatewayURL, client.Options{Pod: "example-resume", Participant: "bob"})
	if err != nil {
		log.Fatal(err)
	}
	say("before")
	var last string // what a real agent would write to disk
	for last == "" {
		ev, err := bob.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if m, ok := ev.(*client.Message); ok && m.InHistory() {
			last = m.ID
		}
	}
	bob.Close()

	say("while bob was away")
	say("still away")
	if err := alice.Sync(ctx); err != nil { // the gateway has both
		log.Fatal(err)
	}

	bob, err = client.Dial(ctx, gatewayURL, client.Options{Pod: "example-resume", Participant: "bob", Resume: last})
	if err != nil {
		log.Fatal(err)
	}
	defer bob.Close()
	for n := 0; n < 2; {
		ev, err := bob.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		switch ev := ev.(type) {
		case *client.Welcome:
			fmt.Println("resumed:", ev.History != nil && ev.History.Resumed != nil && *ev.History.Resumed)
		case *client.Message:
			fmt.Printf("%s\n", ev.Payload)
			n++
		}
	}
	// Output:
	// resumed: true
	// {"text":"while bob was away"}
	// {"text":"still away"}
}

// A script publishes without joining: nobody in the pod sees it join or
// leave, and each result says what became of one envelope.
func ExamplePublish() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	opts := client.PublishOptions{Pod: "example-publish", Participant: "ci"}
	res, err := client.Publish(ctx, gatewayURL, opts,
		&wire.Envelope{ID: "build-41", Kind: "chat", Payload: json.RawMessage(`{"text":"build 41 is green"}`)},
		&wire.Envelope{ID: "build-42", Kind: "system/build"})
	if err != nil {
		log.Fatal(err) // the request as a whole: unreachable, or a *client.RefusedError
	}
	for _, r := range res {
		if err := client.ResultError(r); err != nil {
			fmt.Println("refused:", err.(*client.GatewayError).Code)
		} else {
			fmt.Println("relayed", r.ID)
		}
	}

	// Ask the gateway, without joining either.
	answer, err := client.Ask(ctx, gatewayURL, opts, wire.RequestHistory, wire.HistoryRequest{Limit: 10})
	if err != nil {
		log.Fatal(err)
	}
	var h wire.HistoryAnswer
	_ = json.Unmarshal(answer, &h)
	fmt.Println(len(h.Envelopes), "envelope in the history:", h.Envelopes[0].ID)
	// Output:
	// relayed build-41
	// refused: reserved_kind
	// 1 envelope in the history: build-41
}

// A Conn hands over the gateway's bytes untouched: here a relay that
// receives the pod's envelopes with batch=1 (several a WebSocket message,
// one per line) and passes them on as they are, reusing one buffer.
func ExampleDialConn() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	relay, err := client.DialConn(ctx, gatewayURL+"?batch=1", client.Options{Pod: "conn-example", Participant: "relay"})
	if err != nil {
		log.Fatal(err)
	}
	defer relay.Close()
	buf, err := relay.Read(ctx, nil) // the welcome comes first
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("relay:", bytes.Contains(buf, []byte(`"kind":"system/welcome"`)))

	tool, err := client.DialConn(ctx, gatewayURL, client.Options{Pod: "conn-example", Participant: "tool"})
	if err != nil {
		log.Fatal(err)
	}
	defer tool.Close()
	if err := tool.Write(ctx, []byte(`{"kind":"chat","payload":{"text":"as is"}}`)); err != nil {
		log.Fatal(err)
	}
	for {
		if buf, err = relay.Read(ctx, buf[:0]); err != nil {
			log.Fatal(err)
		}
		for _, line := range bytes.Split(buf, []byte("\n")) {
			if bytes.Contains(line, []byte(`"kind":"chat"`)) {
				fmt.Println("relay: a chat from tool:", bytes.Contains(line, []byte(`"from":"tool"`)))
				return
			}
		}
	}
	// Output:
	// relay: true
	// relay: a chat from tool: true
}
