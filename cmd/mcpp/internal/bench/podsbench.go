package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// The window of a --pods run when --duration is not given: long enough
// that every server collects inside it at the size (issue 32),
// short where a test or a quick look runs a few pods.
const (
	podsWindowLarge      = 60 * time.Second
	podsWindowLargeFrom  = 6000 // pods
	podsWindowMedium     = 30 * time.Second
	podsWindowMediumFrom = 1000
	podsWindowSmall      = 10 * time.Second
)

// After the joins, a run waits for the presence of the last ones to go
// out and the writers to go idle (the gateway lets an idle writer go
// after 1-2 s) before it reads the joined RSS: podsSettleLarge from
// podsSettleLargeFrom connections, podsSettleSmall below. After the
// window it waits until every delivery came, podsDrain at most.
const (
	podsSettleLarge     = 5 * time.Second
	podsSettleLargeFrom = 3000
	podsSettleSmall     = time.Second
	podsDrain           = 3 * time.Second
	podsDrainPoll       = 20 * time.Millisecond
)

// podsWindow is --duration's default for --pods.
func podsWindow(pods int) time.Duration {
	switch {
	case pods >= podsWindowLargeFrom:
		return podsWindowLarge
	case pods >= podsWindowMediumFrom:
		return podsWindowMedium
	}
	return podsWindowSmall
}

func podsSettle(conns int) time.Duration {
	if conns >= podsSettleLargeFrom {
		return podsSettleLarge
	}
	return podsSettleSmall
}

// podsServer is one server a --pods run measures: the gateway, with
// --gateway-args and extra, or nats-server.
type podsServer struct {
	label string
	nats  bool
	extra []string
}

// podsServers are the servers of a --pods run, in the order each round
// runs them: the gateway, the gateway with each --versus, nats-server.
func podsServers(versus [][]string, nats bool) []podsServer {
	s := []podsServer{{label: "gateway"}}
	for _, v := range versus {
		s = append(s, podsServer{label: "gateway " + strings.Join(v, " "), extra: v})
	}
	if nats {
		s = append(s, podsServer{label: "nats", nats: true})
	}
	return s
}

// podsPlan is a whole --pods command: the load, the servers, the rounds.
type podsPlan struct {
	load    podsLoad
	servers []podsServer
	rounds  int
	remote  []string // --gateway's nodes: measured as they are, nothing started
	token   string
	json    bool
}

// pods runs every server of the plan once a round, one at a time, each
// in a fresh process, and reports each run and, side by side, the
// medians of every server.
func (b *bencher) pods(ctx context.Context, p podsPlan) error {
	conns := p.load.Pods * p.load.Members
	if err := checkOpenFiles(conns); err != nil {
		return err
	}
	rep := newPodsReport(p, newSourceAddrs(conns, len(p.remote) == 0))
	if !p.json {
		fmt.Fprint(b.out, rep.header())
	}
	for round := 1; round <= p.rounds; round++ {
		for _, s := range p.servers {
			row, err := b.podsOnce(ctx, p, s, round)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", s.label, round, err)
			}
			rep.add(row)
			if !p.json {
				fmt.Fprint(b.out, row.text(p.load))
			} else if b.progress != nil {
				fmt.Fprint(b.progress, row.text(p.load))
			}
			// What this run left in the client is not the next one's.
			runtime.GC()
			debug.FreeOSMemory()
		}
	}
	if p.json {
		return rep.writeJSON(b.out)
	}
	fmt.Fprint(b.out, rep.table())
	return nil
}

// podsOnce starts s fresh (unless the plan measures --gateway's nodes),
// runs the load against it and stops it.
func (b *bencher) podsOnce(ctx context.Context, p podsPlan, s podsServer, round int) (podsRow, error) {
	l := p.load
	conns := l.Pods * l.Members
	if len(p.remote) > 0 {
		l.Transport = gatewayPods{urls: p.remote, token: p.token, sources: newSourceAddrs(conns, false)}
		r, err := l.run(ctx)
		return newPodsRow(s.label, round, l, r, nil), err
	}
	o, tracer := traced()
	var srv *server
	var err error
	if s.nats {
		srv, err = startNATSProcessWith(o)
	} else {
		var bin string
		if bin, err = gatewayBinary(b.gwBin); err != nil {
			return podsRow{}, err
		}
		args := append([]string{"--max-pods", strconv.Itoa(l.Pods), "--max-connections", strconv.Itoa(conns + 100)}, b.gwArgs...)
		args = append(args, s.extra...)
		var cleanup func()
		if args, cleanup, err = freshHistoryDir(args); err != nil {
			return podsRow{}, err
		}
		defer cleanup()
		srv, err = startGatewayProcessWith(bin, args, o)
	}
	if err != nil {
		return podsRow{}, err
	}
	defer srv.stop()
	sources := newSourceAddrs(conns, true)
	if s.nats {
		l.Transport = natsPods{url: srv.ws, sources: sources}
	} else {
		l.Transport = gatewayPods{urls: []string{srv.ws}, token: p.token, sources: sources}
	}
	l.PIDs = []int{srv.pid()}
	r, err := l.run(ctx)
	if err != nil {
		return podsRow{}, err
	}
	gc := tracer.window(r.WindowStart, r.WindowEnd)
	return newPodsRow(s.label, round, l, r, &gc), nil
}

// freshHistoryDir gives a run of the gateway a history of its own: where
// args name --history-dir DIR (the last one counts, as in the gateway's
// flags), a new directory inside DIR, removed by cleanup once the run is
// over, so that no run starts with another's history.
func freshHistoryDir(args []string) ([]string, func(), error) {
	args = append([]string{}, args...)
	at, value, inline := -1, "", false // args[at] holds the directory
	for i := 0; i < len(args); i++ {
		name, v, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if name != "history-dir" || !strings.HasPrefix(args[i], "-") {
			continue
		}
		at, value, inline = i, v, hasValue
		if !hasValue {
			if i+1 == len(args) {
				return nil, nil, fmt.Errorf("--gateway-args: --history-dir needs a directory")
			}
			i++
			at, value = i, args[i]
		}
	}
	if at < 0 || value == "" {
		return args, func() {}, nil
	}
	dir, err := os.MkdirTemp(value, "bench-run-")
	if err != nil {
		return nil, nil, fmt.Errorf("--history-dir: %w", err)
	}
	if inline {
		args[at] = "--history-dir=" + dir
	} else {
		args[at] = dir
	}
	return args, func() { _ = os.RemoveAll(dir) }, nil
}
