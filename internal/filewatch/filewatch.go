// Package filewatch tells when files the gateway reads have changed, so
// that it reads them again without a restart: the token files and JWT
// keys (package tokens), the TLS certificate and key (package gateway).
// It polls: a file changed when it differs in size, modification time or
// which file its path names (a new file renamed into place, as a mounted
// Kubernetes Secret is updated), and a file that appeared or vanished, or
// whose error changed, changed too. Polling costs one stat a file an
// interval, works on every filesystem, and sees a rename into place that
// an inotify watch on the old file would miss.
package filewatch

import (
	"context"
	"os"
	"sync"
	"time"
)

// Stamp is what a file looked like when it was read.
type Stamp struct {
	info os.FileInfo // nil when the file could not be read
	err  string
}

// StampOf is the stamp of path now.
func StampOf(path string) Stamp {
	info, err := os.Stat(path)
	if err != nil {
		return Stamp{err: err.Error()}
	}
	return Stamp{info: info}
}

// Same reports whether a and b are stamps of the same contents.
func (a Stamp) Same(b Stamp) bool {
	if a.info == nil || b.info == nil {
		return a.info == nil && b.info == nil && a.err == b.err
	}
	return os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime())
}

// Seen is what a set of files looked like when they were last read. The
// zero value is ready to use; it is safe for concurrent use.
type Seen struct {
	mu    sync.Mutex
	files map[string]Stamp
}

// Read notes what path looks like now, just before it is read, so that a
// change made while it is read is seen by the next Changed.
func (s *Seen) Read(path string) {
	st := StampOf(path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		s.files = map[string]Stamp{}
	}
	s.files[path] = st
}

// Changed reports whether a file noted with Read differs from what it was
// then.
func (s *Seen) Changed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for path, st := range s.files {
		if !StampOf(path).Same(st) {
			return true
		}
	}
	return false
}

// Poll calls changed every interval until ctx ends, and reload each time
// it reports true.
func Poll(ctx context.Context, interval time.Duration, changed func() bool, reload func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if changed() {
			reload()
		}
	}
}
