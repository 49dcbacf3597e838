package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcpp/gateway/client"
	"github.com/mcpp/gateway/wire"
)

var historyCommand = command{
	synopsis: "--pod NAME [--fold=0] [--context ID] [--limit N] [--json | --pretty]",
	summary:  "Print the pod's history, oldest first, without joining the pod.",
	usage: `Asks the gateway for the pod's history (gateway/history requests, POSTed
to /pods/NAME/envelopes: history does not join the pod, so nobody sees a
join or a leave) and prints it oldest first: each page is the newest
envelopes older than the page before (before=ID), until --limit envelopes
or the whole history. The history is the pod's envelopes and its
system/context events as they were relayed, for as long as the gateway
keeps them (docs/protocol.md section 8), seen through the default filter
(everything).

By default the history is folded, as a participant that joins with
history= receives it: a concluded context shows only its conclusion-kind
envelopes and its system/context event, and a consumed transient
envelope comes collapsed ({"collapsed":true,"summary":…,"consumed_by":…}).

Flags:
  --fold=0        the history unfolded and uncollapsed: every envelope, as
                  it was relayed
  --context ID    only that context and its descendants
  --limit N       at most the N newest envelopes (default 0: all)
  --json          each envelope as one line of JSON, as the gateway keeps
                  it (the default)
  --pretty        a view for people, as tail --pretty shows it: a concluded
                  context's conclusion is marked "⤶ fold", its
                  system/context event says how many of its envelopes were
                  folded away, and a collapsed envelope shows its summary
                  and "collapsed, consumed by ID"; in colour on a terminal
                  unless NO_COLOR is set
  --timeout D     how long to wait for each page (default 5s)

Without envelopes (an empty pod, or a gateway with history off) history
prints nothing on standard output and says so on standard error.
`,
	run: runHistory,
}

// maxHistoryPage is the largest limit of a gateway/history request.
const maxHistoryPage = 1000

func runHistory(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("history")
	var cf connFlags
	cf.register(fs, e)
	fold := fs.Bool("fold", true, "")
	contextID := fs.String("context", "", "")
	limit := fs.Int("limit", 0, "")
	asJSON := fs.Bool("json", false, "")
	pretty := fs.Bool("pretty", false, "")
	timeout := fs.Duration("timeout", 5*time.Second, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if *limit < 0 {
		return usagef("--limit must be 0 (all) or more, not %d", *limit)
	}
	if *asJSON && *pretty {
		return usagef("--json and --pretty are two ways to print: choose one")
	}
	if *timeout <= 0 {
		return usagef("--timeout must be positive")
	}

	opts := cf.publishOptions()
	var pages [][]json.RawMessage
	total, before, more := 0, "", false
	for {
		n := maxHistoryPage
		if *limit > 0 {
			n = min(n, *limit-total)
		}
		q := wire.HistoryRequest{Before: before, Context: *contextID, Limit: n}
		if !*fold {
			q.Fold = wire.Bool(false)
		}
		page, err := askHistory(ctx, &cf, opts, q, *timeout)
		if err != nil {
			return err
		}
		more = page.More
		if len(page.Envelopes) == 0 {
			break
		}
		pages = append(pages, page.Envelopes)
		total += len(page.Envelopes)
		if !more || (*limit > 0 && total >= *limit) {
			break
		}
		var first struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(page.Envelopes[0], &first) != nil || first.ID == "" {
			return fmt.Errorf("the gateway's history holds an envelope without an id, to page before: %.200s", page.Envelopes[0])
		}
		before = first.ID
	}
	if total == 0 {
		what := "pod " + cf.pod
		if *contextID != "" {
			what = "context " + *contextID + " of " + what
		}
		fmt.Fprintf(e.stderr, "no history in %s (the gateway may have history off)\n", what)
		return nil
	}
	var list []json.RawMessage
	for i := len(pages) - 1; i >= 0; i-- {
		list = append(list, pages[i]...)
	}

	out := bufio.NewWriterSize(e.stdout, 64<<10)
	if *pretty {
		p := newPrinter(e.stdoutColor)
		learnContexts(p.ctxs, list)
		folds := foldLines(list, *fold)
		now := time.Now()
		for i, raw := range list {
			out.WriteString(p.formatView(raw, now, view{replayed: true, folded: *fold, fold: folds[i]}))
			out.WriteByte('\n')
		}
	} else {
		for _, raw := range list {
			out.Write(raw)
			out.WriteByte('\n')
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(e.stderr, "mcpp history: older envelopes left out (--limit %d)\n", *limit)
	}
	return nil
}

// historyPage is the payload of system/history, its envelopes as the
// gateway wrote them.
type historyPage = wire.HistoryAnswerOf[json.RawMessage]

// askHistory asks for one page of history.
func askHistory(ctx context.Context, cf *connFlags, opts client.PublishOptions, q wire.HistoryRequest, timeout time.Duration) (*historyPage, error) {
	rctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	answer, err := client.Ask(rctx, cf.endpoint(), opts, wire.RequestHistory, q)
	var ge *client.GatewayError
	switch {
	case errors.As(err, &ge):
		return nil, fmt.Errorf("refused: %s", ge.ErrorPayload)
	case err != nil:
		return nil, cf.explain(ctx, err, "request")
	}
	var page historyPage
	if err := json.Unmarshal(answer, &page); err != nil {
		return nil, fmt.Errorf("the answer does not read: %v", err)
	}
	return &page, nil
}

// foldLines says which envelopes of a folded history stand for a
// concluded context whose other envelopes were folded away: those in a
// context whose system/context event comes later in the list (folding
// keeps only the conclusion-kind envelopes of a concluded context).
func foldLines(list []json.RawMessage, folded bool) []bool {
	marks := make([]bool, len(list))
	if !folded {
		return marks
	}
	concluded := map[string]bool{} // contexts whose event comes later
	for i := len(list) - 1; i >= 0; i-- {
		var env wire.Envelope
		if json.Unmarshal(list[i], &env) != nil {
			continue
		}
		id := env.ContextID()
		switch {
		case id == "":
		case env.Kind == wire.KindContext:
			concluded[id] = true
		default:
			marks[i] = concluded[id]
		}
	}
	return marks
}

// learnContexts tells the view the type and parent of every context with
// a system/context event in list (which carries them): a folded history
// may have left out the envelope that created the context, and its
// conclusion alone may not say them. Parents are learnt in as many
// rounds as contexts nest.
func learnContexts(v *contextView, list []json.RawMessage) {
	var events []json.RawMessage
	for _, raw := range list {
		var env wire.Envelope
		if json.Unmarshal(raw, &env) == nil && env.Kind == wire.KindContext {
			events = append(events, env.Context)
		}
	}
	for range maxNesting {
		for _, c := range events {
			v.resolve(c)
		}
	}
}

// maxNesting is the gateway's default --max-depth, the rounds of
// learnContexts.
const maxNesting = 5
