package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

var contextsCommand = command{
	synopsis: "--pod NAME [--state active|concluded|all] [--type T] [--id ID] [--limit N] [--json]",
	summary:  "List the pod's contexts as a tree.",
	usage: `Asks the gateway (a gateway/contexts request POSTed to
/pods/NAME/envelopes: contexts does not join the pod, so nobody sees a join
or a leave) and prints the contexts as a tree, children indented under
their parents, with type, state, message count and age (since creation). A
context whose parent is not in the answer is shown at the top level with
"(parent X)".

Flags:
  --state S       active (default), concluded or all
  --type T        only contexts of this type
  --id ID         only this context
  --limit N       at most N contexts (default: the gateway's, 1000)
  --json          print the gateway's answer as the system/contexts
                  envelope a participant would receive, one line of JSON
                  (the payload as the gateway wrote it)
  --timeout D     how long to wait for the answer (default 5s)
`,
	run: runContexts,
}

// contextInfo is one entry of system/contexts (docs/protocol.md section 6).
type contextInfo = wire.ContextInfo

func runContexts(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("contexts")
	var cf connFlags
	cf.register(fs, e)
	state := fs.String("state", "active", "")
	typ := fs.String("type", "", "")
	id := fs.String("id", "", "")
	limit := fs.Int("limit", 0, "")
	asJSON := fs.Bool("json", false, "")
	timeout := fs.Duration("timeout", 5*time.Second, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	switch *state {
	case "active", "concluded", "all":
	default:
		return usagef("--state must be active, concluded or all, not %q", *state)
	}
	if *limit < 0 {
		return usagef("--limit must be 1 or more")
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	q := wire.ContextsRequest{State: *state, Type: *typ, ID: *id, Limit: *limit}
	rctx, cancel := withTimeout(ctx, *timeout)
	defer cancel()
	answer, err := client.Ask(rctx, cf.endpoint(), cf.publishOptions(), wire.RequestContexts, q)
	var ge *client.GatewayError
	switch {
	case errors.As(err, &ge):
		return fmt.Errorf("refused: %s", ge.ErrorPayload)
	case err != nil:
		return cf.explain(ctx, err, "request")
	}
	if *asJSON {
		// The answer as a participant would receive it over WebSocket.
		b, err := json.Marshal(wire.Envelope{Protocol: wire.ProtocolMCPP, From: wire.GatewayID, Kind: wire.KindContexts, Payload: answer})
		if err != nil {
			return fmt.Errorf("the answer does not read: %v", err)
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
		return nil
	}
	var p wire.ContextsAnswer
	if err := json.Unmarshal(answer, &p); err != nil {
		return fmt.Errorf("the answer does not read: %v", err)
	}
	if len(p.Contexts) == 0 {
		what := *state
		if what == "all" {
			what = "active or concluded"
		}
		fmt.Fprintf(e.stderr, "no %s contexts in pod %s\n", what, cf.pod)
		return nil
	}
	renderTree(e.stdout, p.Contexts, time.Now())
	return nil
}

// renderTree prints the contexts as a tree: children indented under their
// parents, in the order given (the gateway's: oldest first). A context
// whose parent is not in the list is a root, noted "(parent X)".
func renderTree(w io.Writer, list []contextInfo, now time.Time) {
	// With --state all an id can be listed twice (a concluded context and
	// the new one that reused its id): a child belongs to the last entry
	// of its parent's id listed before it (the list is oldest first).
	instances := map[string][]int{}
	for i, c := range list {
		instances[c.ID] = append(instances[c.ID], i)
	}
	children := map[int][]int{}
	var roots []int
	for i, c := range list {
		parent, found := deref(c.Parent), -1
		for _, j := range instances[parent] {
			if j != i && (found < 0 || j < i) {
				found = j
			}
		}
		if parent != "" && found >= 0 {
			children[found] = append(children[found], i)
		} else {
			roots = append(roots, i)
		}
	}

	type row struct {
		name, typ, state, msgs, age, note string
	}
	var rows []row
	done := make([]bool, len(list))
	var walk func(i, level int)
	walk = func(i, level int) {
		if done[i] {
			return
		}
		done[i] = true
		c := list[i]
		r := row{
			name:  strings.Repeat("  ", level) + c.ID,
			typ:   deref(c.Type),
			state: c.State,
			msgs:  fmt.Sprint(c.Messages),
			age:   "-",
		}
		if r.typ == "" {
			r.typ = "-"
		}
		if c.Reason != nil && *c.Reason != "" {
			r.state += " (" + *c.Reason + ")"
		}
		if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
			r.age = age(now.Sub(t))
		}
		if p := deref(c.Parent); p != "" && level == 0 {
			r.note = "(parent " + p + ")"
		}
		rows = append(rows, r)
		for _, k := range children[i] {
			walk(k, level+1)
		}
	}
	for _, i := range roots {
		walk(i, 0)
	}
	for i := range list { // a parent cycle has no root: show what is left
		walk(i, 0)
	}

	head := row{name: "CONTEXT", typ: "TYPE", state: "STATE", msgs: "MSGS", age: "AGE"}
	widths := [4]int{}
	for _, r := range append([]row{head}, rows...) {
		for k, s := range []string{r.name, r.typ, r.state, r.msgs} {
			widths[k] = max(widths[k], utf8.RuneCountInString(s))
		}
	}
	for _, r := range append([]row{head}, rows...) {
		line := pad(r.name, widths[0]+2) + pad(r.typ, widths[1]+2) + pad(r.state, widths[2]+2) +
			strings.Repeat(" ", widths[3]-len(r.msgs)) + r.msgs + "  " + r.age
		if r.note != "" {
			line += "  " + r.note
		}
		fmt.Fprintln(w, line)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// age is a short duration: 42s, 3m05s, 2h07m, 3d04h.
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	default:
		return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
	}
}
