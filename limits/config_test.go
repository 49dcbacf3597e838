package limits

import (
	"bytes"
	"encoding/json"
	"flag"
	"slices"
	"strings"
	"testing"
	"time"
)

// documentedWelcome is the limits object of the welcome in
// docs/protocol.md section 5 (a gateway started with --max-pods 1000),
// compacted: the defaults must give it byte for byte.
const documentedWelcome = `{"max_message_bytes":1048576,"max_context_bytes":4096,"max_depth":5,` +
	`"rate":100,"burst":200,"context_rate":50,"context_burst":100,` +
	`"context_create_rate":10,"context_create_burst":20,` +
	`"context_timeout_ms":300000,"context_retention_ms":600000,` +
	`"conclusion_kinds":["conclusion","reasoning/conclusion","reasoning/end"],` +
	`"max_contexts_per_participant":256,"max_contexts_per_pod":10000,` +
	`"max_participants_per_pod":1000,"max_connections":10000,"max_pods":1000,` +
	`"send_queue":1024,"send_queue_bytes":8388608,` +
	`"history":1000,"history_age_ms":86400000,"history_bytes":268435456,` +
	`"mcp_session_timeout_ms":1800000}`

// TestWelcomeOfTheDefaults: what a participant is told of the limits is
// what docs/protocol.md shows, for the defaults.
func TestWelcomeOfTheDefaults(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
	c.MaxPods = 1000
	got, err := json.Marshal(c.Welcome())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != documentedWelcome {
		t.Fatalf("the welcome's limits:\n got %s\nwant %s", got, documentedWelcome)
	}
}

// TestFlagsFillTheLimits: every limit given on the command line is in
// the welcome and in the buckets derived from the config, and a list of
// conclusion kinds keeps its order, dropping empty entries.
func TestFlagsFillTheLimits(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	err := fs.Parse([]string{"--rate", "3", "--burst", "4", "--context-create-rate", "0.5", "--context-create-burst", "2",
		"--context-timeout", "90s", "--conclusion-kinds", " done, ,finish,", "--send-queue-bytes", "2MiB", "--max-proposals-per-pod", "9"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	w := c.Welcome()
	if w.Rate != 3 || w.Burst != 4 || w.ContextCreateRate != 0.5 || w.ContextTimeoutMS != 90000 || w.SendQueueBytes != 2<<20 ||
		!slices.Equal(w.ConclusionKinds, []string{"done", "finish"}) || c.MaxProposalsPerPod != 9 {
		t.Fatalf("the flags did not reach the welcome: %+v", w)
	}
	if set := c.ConclusionSet(); len(set) != 2 || !set["done"] || !set["finish"] || set["conclusion"] {
		t.Fatalf("conclusion set %v", set)
	}
	b := c.NewBuckets().Acquire("alice")
	if b.Send.Limit() != 3 || b.Send.Burst() != 4 || b.Create.Limit() != 0.5 || b.Create.Burst() != 2 {
		t.Fatalf("buckets: send %v/%d, create %v/%d", b.Send.Limit(), b.Send.Burst(), b.Create.Limit(), b.Create.Burst())
	}
	c.ConclusionKinds = ""
	if w, _ := json.Marshal(c.Welcome()); !bytes.Contains(w, []byte(`"conclusion_kinds":[]`)) {
		t.Fatalf("no conclusion kinds are written as an empty list: %s", w)
	}
}

// TestValidateNamesTheFlag: each unusable limit is refused with a
// message naming its flag.
func TestValidateNamesTheFlag(t *testing.T) {
	for flagName, edit := range map[string]func(*Config){
		"--max-message-bytes":     func(c *Config) { c.MaxMessageBytes = 255 },
		"--max-context-bytes":     func(c *Config) { c.MaxContextBytes = 15 },
		"--max-depth":             func(c *Config) { c.MaxDepth = 0 },
		"--context-retention":     func(c *Config) { c.ContextRetention = -time.Second },
		"--send-queue":            func(c *Config) { c.SendQueue = 0 },
		"--send-queue-bytes":      func(c *Config) { c.SendQueueBytes = 1023 },
		"rates":                   func(c *Config) { c.ContextCreateBurst = 0 },
		"caps":                    func(c *Config) { c.MaxParticipantsPerPod = 0 },
		"--max-pods":              func(c *Config) { c.MaxPods = -1 },
		"--history must":          func(c *Config) { c.History = -1 },
		"--history-age":           func(c *Config) { c.HistoryAge = time.Millisecond },
		"--history-bytes (":       func(c *Config) { c.MaxMessageBytes, c.HistoryBytes = 1<<20, 2<<20 },
		"--mcp-session-timeout":   func(c *Config) { c.MCPSessionTimeout = 0 },
		"--proposal-timeout":      func(c *Config) { c.ProposalTimeout = time.Millisecond },
		"--max-proposals-per-pod": func(c *Config) { c.MaxProposalsPerPod = 0 },
	} {
		c := Default()
		edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), flagName) {
			t.Errorf("%s: %v", flagName, err)
		}
	}
}
