package gateway

import (
	"fmt"
	"log/slog"
)

// natsLogger hands the embedded NATS server's warnings and errors to the
// gateway's log (its notices, debug and trace are left out: the gateway
// logs what it does itself). Without it a server that cannot start (its
// cluster port taken, its store unwritable) would say nothing, and the
// gateway could only report that it was not ready.
// Its Fatalf (a listener that cannot listen) also ends the gateway's
// wait for the server at once (fatal).
type natsLogger struct {
	log   *slog.Logger
	fatal chan string
}

func newNATSLogger(log *slog.Logger) natsLogger {
	return natsLogger{log: log, fatal: make(chan string, 1)}
}

func (l natsLogger) Noticef(string, ...any) {}
func (l natsLogger) Debugf(string, ...any)  {}
func (l natsLogger) Tracef(string, ...any)  {}

func (l natsLogger) Warnf(format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...), "component", "nats")
}

func (l natsLogger) Errorf(format string, v ...any) {
	l.log.Error(fmt.Sprintf(format, v...), "component", "nats")
}

func (l natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg, "component", "nats")
	select {
	case l.fatal <- msg:
	default:
	}
}
