package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/mcpp/gateway/cmd/mcpp/internal/bench"
	"github.com/mcpp/gateway/cmd/mcpp/internal/relay"
)

// Exit codes.
const (
	exitOK      = 0 // done
	exitRefused = 1 // refused by the gateway, or the gateway could not be reached
	exitUsage   = 2 // the command line is wrong
)

// command is one subcommand.
type command struct {
	synopsis string // the arguments after "mcpp NAME", for the usage
	summary  string // one line
	usage    string // the flags, for "mcpp NAME -h"
	run      func(ctx context.Context, e *env, args []string) error
}

// commands is the dispatch table. Each subcommand lives in its own file
// (tail.go, send.go, contexts.go, history.go, bridge.go, admin.go); a new one adds
// its line here.
var commands = map[string]command{
	"tail":     tailCommand,
	"send":     sendCommand,
	"contexts": contextsCommand,
	"history":  historyCommand,
	"bridge":   bridgeCommand,
	"admin":    adminCommand,
	// bench has flags and exit codes of its own (package bench); run
	// hands it the command line before this table is consulted.
	"bench": {synopsis: "[flags]", summary: "Measure fan-out speed, latency and memory, against a bare-relay baseline"},
}

// env is what a command reads and writes, so that tests can run it in
// process.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// stdoutColor and stderrColor: colour is allowed on that stream (it is
	// a terminal and NO_COLOR is not set).
	stdoutColor bool
	stderrColor bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		stdoutColor: colorAllowed(os.Stdout), stderrColor: colorAllowed(os.Stderr),
	}
	code := run(ctx, e, os.Args[1:])
	stop()
	os.Exit(code)
}

// colorAllowed reports whether f is a terminal and NO_COLOR is unset.
func colorAllowed(f *os.File) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// run runs the command line args (without the program name) and returns
// the exit code.
func run(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		printUsage(e.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 {
			if args[1] == "bench" {
				return bench.Run([]string{"-h"}, e.stdout, e.stdout)
			}
			if c, ok := commands[args[1]]; ok {
				printCommandUsage(e.stdout, args[1], c)
				return exitOK
			}
			fmt.Fprintf(e.stderr, "mcpp: unknown command %q\n", args[1])
			return exitUsage
		}
		printUsage(e.stdout)
		return exitOK
	}
	switch name {
	case "bench":
		return bench.Run(args[1:], e.stdout, e.stderr)
	case "_relay": // the baseline server that bench starts in its own process
		return relay.Main(args[1:])
	case "_nats": // the nats-server that bench --peer nats starts in its own process
		return bench.NATSMain(args[1:])
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(e.stderr, "mcpp: unknown command %q (commands: %s)\nRun 'mcpp help' for usage.\n", name, strings.Join(commandNames(), ", "))
		return exitUsage
	}
	err := c.run(ctx, e, args[1:])
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		printCommandUsage(e.stdout, name, c)
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "mcpp %s: %s\nRun 'mcpp %s -h' for usage.\n", name, ue.msg, name)
		return exitUsage
	case errors.Is(err, errReported):
		return exitRefused
	default:
		fmt.Fprintf(e.stderr, "mcpp %s: %v\n", name, err)
		return exitRefused
	}
}

// usageError is a wrong command line: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errReported is a failure whose details the command has already printed:
// exit 1 with nothing more said.
var errReported = errors.New("failed")

func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: mcpp COMMAND [flags]

mcpp is the command-line client of the MCPP pod gateway.

Commands:
`)
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `
tail joins the pod over WebSocket; send, contexts and history do not: they
POST to /pods/NAME/envelopes, so nobody in the pod sees them join or leave.

The pod's past (docs/protocol.md section 8): 'tail --history N|all' prints
it before the live envelopes, 'tail --resume-file F' picks up after the
last envelope a previous tail printed (none missing, none twice), and
'history' prints it alone. It is folded unless --fold=0: a concluded
context shows only its conclusion and its system/context event, a consumed
transient envelope comes collapsed to its summary; --pretty marks both.

Run 'mcpp COMMAND -h' for a command's flags.

`+connectionUsage+`
Exit status: 0 done, 1 refused by the gateway (or it could not be
reached, or it closed the connection for good), 2 usage error.
`)
}

func printCommandUsage(w io.Writer, name string, c command) {
	fmt.Fprintf(w, "Usage: mcpp %s %s\n\n%s\n\n%s\n%s", name, c.synopsis, c.summary, strings.TrimRight(c.usage, "\n")+"\n", connectionUsage)
}

// newFlagSet makes a flag set that reports its errors as values: run
// prints them.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("mcpp "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args and refuses positional arguments: no command
// takes any.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{msg: err.Error()}
	}
	if fs.NArg() > 0 {
		a := fs.Arg(0)
		switch strings.ToLower(a) {
		case "0", "1", "true", "false":
			return usagef("unexpected argument %q: a yes/no flag takes its value after =, as in --main=0", a)
		}
		return usagef("unexpected argument %q (values go in flags)", a)
	}
	return nil
}
