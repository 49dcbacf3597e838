package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mcpp/gateway/wire"
)

// adminSynopses are the subcommands' lines of the synopsis.
var adminSynopses = []string{
	"pods [--cluster] [--limit N] [--after NAME] [--all]",
	"pod NAME [--cluster]",
	"kick PARTICIPANT [--pods A,B] [--reason R] [--ban D]",
	"revoke --pod NAME GRANT_ID [--reason R]",
	"drain",
}

var adminCommand = command{
	synopsis: strings.Join(adminSynopses, " | "),
	summary:  "Operate the gateway: list pods and their members, kick, revoke a grant, drain a node.",
	usage: `Speaks the gateway's operator's API (docs/protocol.md section 7, HTTP
under /admin/) with --token, which must hold the gateway/admin capability
(exactly that kind: * and gateway/* do not give it). It reaches the pods
of the token's pods (a drain needs "*"). An open gateway answers it only
from its own machine, on a loopback address, without a token.

Subcommands:
  pods              the pods open on the node (--cluster: on every node of
                    the cluster), by name: members, observers, contexts
                    (active/concluded), pending proposals, grants, bans
    --cluster       ask every node; the nodes that did not answer are named
                    on standard error, and mcpp exits 1
    --limit N       pods per page (1 to 1000, default 100)
    --after NAME    the page after pod NAME (what the last page said)
    --all           every page, one after the other
  pod NAME          one pod in full: each member (node, via, since, queue,
                    address), the active contexts, the pending proposals,
                    the grants in force (their ids, for revoke), the bans
    --cluster       every node's members of it
  kick PARTICIPANT  remove the participant from the pods where it is (on
                    every node), as system:admin: it is closed with 4410
    --pods A,B      only these pods (the participant need not be there: a
                    ban still holds)
    --reason R      told to it and to the pod (at most 80 bytes)
    --ban D         keep it out for D (e.g. 10m; at most 168h)
  revoke GRANT_ID   end a grant in force in --pod, whoever made it, as
                    system:admin
    --reason R      told to its recipient
  drain             the node stops accepting; its connections are closed
                    with 1001 so that they reconnect to another node (as on
                    SIGTERM, but the process stays up until it is stopped)

Every subcommand takes:
  --json            print the gateway's answer, one line of JSON
  --timeout D       how long to wait for the answer (default 30s)
`,
	run: runAdmin,
}

// adminSubcommands are what follows "mcpp admin".
var adminSubcommands = []string{"pods", "pod", "kick", "revoke", "drain"}

// adminCall is one call of the operator's API, as the flags made it.
type adminCall struct {
	cf      connFlags
	e       *env
	asJSON  bool
	timeout time.Duration
}

func runAdmin(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usagef("a subcommand is needed: %s", strings.Join(adminSubcommands, ", "))
	}
	sub := args[0]
	switch sub {
	case "-h", "-help", "--help", "help":
		return flag.ErrHelp
	}
	fs := newFlagSet("admin " + sub)
	a := &adminCall{e: e}
	a.cf.register(fs, e)
	fs.BoolVar(&a.asJSON, "json", false, "")
	fs.DurationVar(&a.timeout, "timeout", 30*time.Second, "")
	var (
		cluster, all bool
		limit        int
		after        string
		pods, reason string
		ban          time.Duration
	)
	switch sub {
	case "pods":
		fs.BoolVar(&cluster, "cluster", false, "")
		fs.IntVar(&limit, "limit", 0, "")
		fs.StringVar(&after, "after", "", "")
		fs.BoolVar(&all, "all", false, "")
	case "pod":
		fs.BoolVar(&cluster, "cluster", false, "")
	case "kick":
		fs.StringVar(&pods, "pods", "", "")
		fs.StringVar(&reason, "reason", "", "")
		fs.DurationVar(&ban, "ban", 0, "")
	case "revoke":
		fs.StringVar(&reason, "reason", "", "")
	case "drain":
	default:
		return usagef("unknown subcommand %q (subcommands: %s)", sub, strings.Join(adminSubcommands, ", "))
	}
	positional, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	if err := a.check(); err != nil {
		return err
	}
	want := map[string]int{"pod": 1, "kick": 1, "revoke": 1}[sub]
	if len(positional) != want {
		return usagef("mcpp admin %s takes %d argument(s), not %d: mcpp admin %s", sub, want, len(positional), adminSynopsis(sub))
	}
	switch sub {
	case "pods":
		if limit < 0 || limit > 1000 {
			return usagef("--limit is 1 to 1000")
		}
		return a.pods(ctx, cluster, limit, after, all)
	case "pod":
		return a.pod(ctx, positional[0], cluster)
	case "kick":
		if ban < 0 || ban > 7*24*time.Hour {
			return usagef("--ban is 0 to 168h (a week)")
		}
		k := wire.AdminKick{Participant: positional[0], Reason: reason, BanMS: ban.Milliseconds()}
		if pods != "" {
			for _, p := range strings.Split(pods, ",") {
				if p = strings.TrimSpace(p); p != "" {
					k.Pods = append(k.Pods, p)
				}
			}
		}
		return a.kick(ctx, k)
	case "revoke":
		if a.cf.pod == "" {
			return usagef("--pod names the pod of the grant (or set MCPP_POD)")
		}
		return a.revoke(ctx, wire.AdminRevoke{Pod: a.cf.pod, GrantID: positional[0], Reason: reason})
	default:
		return a.drain(ctx)
	}
}

// adminSynopsis is one subcommand's line of the synopsis.
func adminSynopsis(sub string) string {
	for _, s := range adminSynopses {
		if strings.HasPrefix(s, sub+" ") || s == sub {
			return s
		}
	}
	return sub
}

// parseInterleaved parses flags that may come before, between or after
// the positional arguments (mcpp admin pod lab --json), and returns the
// positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{msg: err.Error()}
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// check checks the connection flags (--pod is not needed, but by revoke).
func (a *adminCall) check() error {
	if a.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	pod := a.cf.pod
	a.cf.pod = "-" // connFlags.check asks for one; the operator's API does not
	err := a.cf.check()
	a.cf.pod = pod
	return err
}

// base is the gateway's HTTP address: --gateway, ws(s) as http(s), less
// /ws.
func (a *adminCall) base() string {
	u, err := gatewayURL(a.cf.gateway)
	if err != nil {
		return a.cf.gateway // check refused it already
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	}
	u.Path, u.RawQuery = strings.TrimSuffix(u.Path, "/ws"), ""
	return u.String()
}

// adminRefusal is a refusal of the operator's API: its status and body.
type adminRefusal struct {
	status int
	body   wire.Refusal
}

func (r *adminRefusal) Error() string {
	return fmt.Sprintf("the gateway refused (HTTP %d %s): %s", r.status, r.body.Code, r.body.Message)
}

// do calls the API: method on path with query, body (nil for none), and
// reads the answer into out; with --json, it prints it as it came too.
func (a *adminCall) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	u := a.base() + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.cf.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.cf.token)
	}
	hc := a.cf.httpClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return a.cf.explain(ctx, err, "request")
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("the answer was cut: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		r := &adminRefusal{status: resp.StatusCode}
		if json.Unmarshal(data, &r.body) != nil || r.body.Code == "" {
			r.body.Message = strings.TrimSpace(string(data))
		}
		return r
	}
	if a.asJSON {
		fmt.Fprintf(a.e.stdout, "%s\n", bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("the answer does not read: %v", err)
	}
	return nil
}

// silent says, on standard error, which nodes did not answer; it reports
// whether any did not (mcpp then exits 1).
func (a *adminCall) silent(nodes []wire.AdminNode) bool {
	any := false
	for _, n := range nodes {
		if !n.Answered {
			fmt.Fprintf(a.e.stderr, "node %s did not answer: %s\n", n.Node, n.Error)
			any = true
		}
	}
	return any
}

func (a *adminCall) pods(ctx context.Context, cluster bool, limit int, after string, all bool) error {
	var printed bool
	incomplete := false
	for {
		q := url.Values{}
		if cluster {
			q.Set("cluster", "1")
		}
		if limit > 0 {
			q.Set("limit", strconv.Itoa(limit))
		}
		if after != "" {
			q.Set("after", after)
		}
		var ans wire.AdminPods
		if err := a.do(ctx, http.MethodGet, wire.PathAdminPods, q, nil, &ans); err != nil {
			return err
		}
		incomplete = a.silent(ans.Nodes) || incomplete
		if !a.asJSON {
			printPods(a.e.stdout, ans.Pods, !printed)
			printed = printed || len(ans.Pods) > 0
		}
		if ans.Next == nil {
			break
		}
		if !all {
			if !a.asJSON {
				fmt.Fprintf(a.e.stderr, "more pods follow: --after %s (or --all)\n", *ans.Next)
			}
			break
		}
		after = *ans.Next
	}
	if !printed && !a.asJSON {
		fmt.Fprintln(a.e.stderr, "no pod open that this token reaches")
	}
	if incomplete {
		return errReported
	}
	return nil
}

func (a *adminCall) pod(ctx context.Context, name string, cluster bool) error {
	q := url.Values{}
	if cluster {
		q.Set("cluster", "1")
	}
	var ans wire.AdminPodAnswer
	if err := a.do(ctx, http.MethodGet, wire.PathAdminPods+"/"+url.PathEscape(name), q, nil, &ans); err != nil {
		return err
	}
	incomplete := a.silent(ans.Nodes)
	if !a.asJSON {
		printPod(a.e.stdout, &ans.Pod, time.Now())
	}
	if incomplete {
		return errReported
	}
	return nil
}

func (a *adminCall) kick(ctx context.Context, k wire.AdminKick) error {
	var ans wire.AdminKickAnswer
	if err := a.do(ctx, http.MethodPost, wire.PathAdminKick, nil, k, &ans); err != nil {
		return err
	}
	failed := a.silent(ans.Nodes)
	for _, r := range ans.Kicks {
		if r.Error != "" {
			fmt.Fprintf(a.e.stderr, "pod %s: not kicked: %s: %s\n", r.Pod, r.Error, r.Message)
			failed = true
			continue
		}
		if a.asJSON {
			continue
		}
		line := fmt.Sprintf("kicked %s from %s (%d connection%s)", ans.Participant, r.Pod, r.Connections, plural(r.Connections))
		if r.BannedUntil != nil {
			line += ", banned until " + *r.BannedUntil
		}
		fmt.Fprintln(a.e.stdout, line)
	}
	if len(ans.Kicks) == 0 && !a.asJSON {
		fmt.Fprintf(a.e.stderr, "%s is in no pod this token reaches (on the nodes that answered)\n", ans.Participant)
	}
	if failed {
		return errReported
	}
	return nil
}

func (a *adminCall) revoke(ctx context.Context, rv wire.AdminRevoke) error {
	var ans wire.AdminRevokeAnswer
	if err := a.do(ctx, http.MethodPost, wire.PathAdminRevoke, nil, rv, &ans); err != nil {
		return err
	}
	if !a.asJSON {
		ev := ans.Revoked
		fmt.Fprintf(a.e.stdout, "revoked grant %s of %s in pod %s (granted by %s: %s)\n",
			ev.GrantID, ev.Recipient, ans.Pod, ev.Grantor, capabilitiesText(ev.Capabilities))
	}
	return nil
}

func (a *adminCall) drain(ctx context.Context) error {
	var ans wire.AdminDrainAnswer
	if err := a.do(ctx, http.MethodPost, wire.PathAdminDrain, nil, struct{}{}, &ans); err != nil {
		return err
	}
	if !a.asJSON {
		what := "drained"
		if ans.Already {
			what = "was drained already"
		}
		fmt.Fprintf(a.e.stdout, "node %s (%s, %s) %s: %d connection%s closed with 1001, %d dropped after the shutdown timeout, in %dms\n",
			ans.Node, ans.Host, ans.Addr, what, ans.Connections, plural(ans.Connections), ans.Dropped, ans.MS)
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
