package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	mcpp "github.com/mcpp/gateway/client"
)

// The clients of the fault suite: members that join a pod on a node of
// their own, send numbered envelopes, read everything, and after a drop
// resume on the first node that takes them, as a client with a list of
// gateways would; and a publisher per pod that publishes over HTTP. Each
// tells the ledger (faults_checker_test.go) what it sent, what it was
// told and what it received, and keeps its view of who is present.

// faultKind is the kind of the suite's envelopes; their ids are
// POD.SENDER.N and their payload {"n": N}.
const faultKind = "f"

// sideEvery puts every sideEvery-th envelope of a sender in the side
// context, which filtered members (contexts=none) do not receive.
const sideEvery = 4

// fmember is one member of a pod.
type fmember struct {
	w        *faultWorld
	pod, id  string
	home     int  // the node it joins first and prefers
	sends    bool // it sends envelopes
	filtered bool // contexts=none: the main context only

	mu        sync.Mutex
	conn      *mcpp.Conn
	epoch     int  // numbers its connections
	node      int  // the node of the connection (-1: none)
	welcomed  bool // the connection's welcome came
	view      map[string]bool
	last      string // the id of the last of the suite's envelopes received: where to resume
	next      int    // the number of the next envelope to send
	inFlight  map[int]int
	presenceE []string // presence that told what the view already said
	trace     []string // the last of its connections, welcomes and presence, for a report
	gaps      int
	closes    map[string]int // how its connections ended, counted
	dials     int            // connections made
	stop      bool
	done      chan struct{}
}

func (m *fmember) name() string { return m.pod + "/" + m.id }

// note keeps an event in the member's trace (the last 200). Call it with
// fmember.mu held.
func (m *fmember) note(format string, args ...any) {
	if len(m.trace) == 200 {
		m.trace = append(m.trace[:0], m.trace[1:]...)
	}
	m.trace = append(m.trace, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

// run keeps the member connected until stopped, sending every `every`.
func (m *fmember) run(every time.Duration) {
	defer close(m.done)
	for {
		m.mu.Lock()
		stop, connected, welcomed, sends := m.stop, m.conn != nil, m.welcomed, m.sends
		m.mu.Unlock()
		if stop {
			return
		}
		if !connected {
			if !m.dial() {
				time.Sleep(200 * time.Millisecond)
			}
			continue
		}
		if sends && welcomed {
			m.sendOne()
		}
		time.Sleep(every)
	}
}

// dial joins on the first node that takes it, from its home on; the
// first join replays the whole pod, the next ones resume.
func (m *fmember) dial() bool {
	m.mu.Lock()
	last := m.last
	m.mu.Unlock()
	for k := range m.w.nodeCount() {
		i := (m.home + k) % m.w.nodeCount()
		if !m.w.up(i) {
			continue
		}
		q := url.Values{"pod": {m.pod}, "participant": {m.id}, "echo": {"1"}, "history": {"all"}}
		if last != "" {
			q.Set("resume", last)
		}
		if m.filtered {
			q.Set("contexts", "none")
		}
		// The public client's own dial timeout: a node may take the
		// other nodes' member lists' 5 s wait to admit a member.
		ctx, cancel := context.WithTimeout(context.Background(), mcpp.DefaultDialTimeout)
		conn, err := mcpp.DialConn(ctx, m.w.ws(i)+"?"+q.Encode(), mcpp.Options{Pod: m.pod, ReadLimit: 64 << 20})
		cancel()
		if err != nil {
			m.mu.Lock()
			m.note("dial to node %d failed: %v", i+1, err)
			m.mu.Unlock()
			continue
		}
		m.mu.Lock()
		m.epoch++
		m.conn, m.node, m.welcomed, m.dials = conn, i, false, m.dials+1
		epoch := m.epoch
		m.note("connection %d to node %d (resume %q)", epoch, i+1, last)
		m.mu.Unlock()
		go m.read(conn, epoch)
		return true
	}
	return false
}

// sendOne sends the member's next envelope.
func (m *fmember) sendOne() {
	m.mu.Lock()
	n, conn, epoch, node := m.next, m.conn, m.epoch, m.node
	if conn == nil || !m.welcomed {
		m.mu.Unlock()
		return // dropped meanwhile
	}
	m.next++
	m.inFlight[n] = epoch
	m.mu.Unlock()
	side := n%sideEvery == sideEvery-1
	m.w.ledger.send(m.pod, m.id, n, side, node)
	env := map[string]any{"id": fmt.Sprintf("%s.%s.%d", m.pod, m.id, n), "kind": faultKind, "payload": map[string]any{"n": n}}
	if side {
		env["context"] = map[string]any{"id": "side", "type": "task"}
	}
	b, _ := json.Marshal(env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = conn.Write(ctx, b) // a write that fails leaves it unanswered; the reader sees the drop
}

// read reads one connection until it ends.
func (m *fmember) read(conn *mcpp.Conn, epoch int) {
	var buf []byte
	for {
		var err error
		buf, err = conn.Read(context.Background(), buf[:0])
		if err != nil {
			m.dropped(conn, epoch, err)
			return
		}
		for _, line := range bytes.Split(buf, []byte("\n")) {
			m.take(line, epoch)
		}
	}
}

// dropped ends connection epoch: what was in flight on it is never
// answered now (indeterminate), and the member dials again.
func (m *fmember) dropped(conn *mcpp.Conn, epoch int, err error) {
	_ = conn.CloseNow()
	how, why := "dropped", ""
	var ce *mcpp.ClosedError
	if errors.As(err, &ce) {
		how, why = fmt.Sprint(int(ce.Code)), " ("+ce.Reason+")"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closes[how]++
	m.note("connection %d ended: %s%s", epoch, how, why)
	if m.epoch != epoch {
		return
	}
	m.conn, m.node, m.welcomed = nil, -1, false
	for n, e := range m.inFlight {
		if e == epoch {
			delete(m.inFlight, n)
		}
	}
}

// take handles one envelope received on connection epoch.
func (m *fmember) take(line []byte, epoch int) {
	if len(line) == 0 {
		return
	}
	r := gjson.ParseBytes(line)
	kind := r.Get("kind").String()
	m.mu.Lock()
	defer m.mu.Unlock()
	if epoch != m.epoch {
		return
	}
	switch kind {
	case "system/welcome":
		m.welcomed = true
		m.view = map[string]bool{}
		for _, p := range r.Get("payload.participants").Array() {
			m.view[p.Get("id").String()] = true
		}
		m.note("welcome on connection %d: %s, history %s", epoch, r.Get("payload.participants.#.id").Raw, r.Get("payload.history").Raw)
		if !r.Get("payload.history.resumed").Bool() {
			m.w.ledger.fresh(m.pod, m.id) // the whole pod is replayed again
		}
	case "system/presence":
		id := r.Get("payload.participant.id").String()
		m.note("presence %s %s (%s)", r.Get("payload.event").String(), id, r.Get("payload.reason").String())
		switch r.Get("payload.event").String() {
		case "join":
			if m.view[id] {
				m.presenceE = append(m.presenceE, fmt.Sprintf("told %s joined, which it knew was there", id))
			}
			m.view[id] = true
		case "leave":
			if !m.view[id] {
				m.presenceE = append(m.presenceE, fmt.Sprintf("told %s left, which it did not know was there", id))
			}
			delete(m.view, id)
		}
	case "system/gap":
		m.gaps++
		m.note("gap %s", r.Get("payload").Raw)
		if r.Get("payload.lost").String() == "presence" {
			id := r.Get("payload.participant.id").String()
			if r.Get("payload.event").String() == "join" {
				m.view[id] = true
			} else {
				delete(m.view, id)
			}
		}
	case "system/error":
		if n, ok := m.own(r.Get("correlation_id").String()); ok {
			m.w.ledger.tell(m.pod, m.id, n, outcomeRefused, r.Get("payload.error").String())
			delete(m.inFlight, n)
		}
	case faultKind:
		from := r.Get("from").String()
		n := int(r.Get("payload.n").Int())
		m.last = r.Get("id").String()
		m.w.ledger.receive(m.pod, m.id, from, n)
		if from == m.id && m.inFlight[n] == epoch {
			m.w.ledger.tell(m.pod, m.id, n, outcomeAcked, "")
			delete(m.inFlight, n)
		}
	}
}

// own reads the number of one of the member's envelope ids.
func (m *fmember) own(id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, m.pod+"."+m.id+".")
	if !ok {
		return 0, false
	}
	var n int
	_, err := fmt.Sscan(rest, &n)
	return n, err == nil
}

// present reports whether the member is connected and welcomed, and its
// view of the others.
func (m *fmember) present() (bool, map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == nil || !m.welcomed {
		return false, nil
	}
	v := make(map[string]bool, len(m.view))
	for id := range m.view {
		v[id] = true
	}
	return true, v
}

// halt stops the members and closes their connections: all told at once,
// for each stops within its sending interval (one after the other, 4,000
// members took hours).
func halt(members []*fmember) {
	for _, m := range members {
		m.mu.Lock()
		m.stop = true
		m.mu.Unlock()
	}
	for _, m := range members {
		<-m.done
		m.mu.Lock()
		conn := m.conn
		m.mu.Unlock()
		if conn != nil {
			_ = conn.CloseNow()
		}
	}
}

// publisher publishes numbered envelopes into a pod over HTTP, one
// request at a time, to the nodes in turn; an envelope is acknowledged by
// its entry in the answer.
type publisher struct {
	w    *faultWorld
	pod  string
	id   string
	n    int
	node int
	stop atomic.Bool
	done chan struct{}
	// answers counts the answers by what they said.
	mu      sync.Mutex
	answers map[string]int
}

func (p *publisher) run(every time.Duration) {
	defer close(p.done)
	client := &http.Client{Timeout: 15 * time.Second}
	for !p.stop.Load() {
		i := p.node % p.w.nodeCount()
		p.node++
		if !p.w.up(i) {
			continue
		}
		n := p.n
		p.n++
		side := n%sideEvery == sideEvery-1
		p.w.ledger.send(p.pod, p.id, n, side, i)
		env := map[string]any{"id": fmt.Sprintf("%s.%s.%d", p.pod, p.id, n), "kind": faultKind, "payload": map[string]any{"n": n}}
		if side {
			env["context"] = map[string]any{"id": "side", "type": "task"}
		}
		b, _ := json.Marshal(env)
		u := fmt.Sprintf("%s/pods/%s/envelopes?participant=%s", p.w.http(i), p.pod, p.id)
		resp, err := client.Post(u, "application/json", bytes.NewReader(b))
		what := "no answer"
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			res := gjson.GetBytes(body, "results.0")
			switch {
			case resp.StatusCode != http.StatusOK:
				what = fmt.Sprint(resp.StatusCode)
				p.w.ledger.tell(p.pod, p.id, n, outcomeRefused, gjson.GetBytes(body, "error").String())
			case res.Get("error").String() == "unconfirmed":
				what = "unconfirmed" // accepted, not confirmed stored: indeterminate
			case res.Get("error").Exists():
				what = res.Get("error").String()
				p.w.ledger.tell(p.pod, p.id, n, outcomeRefused, what)
			case res.Get("id").String() != "":
				what = "acknowledged"
				p.w.ledger.tell(p.pod, p.id, n, outcomeAcked, "")
			}
		}
		p.mu.Lock()
		p.answers[what]++
		p.mu.Unlock()
		time.Sleep(every)
	}
}
