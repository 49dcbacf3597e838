package limits

import (
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mcpp/gateway/wire"
)

// Config is every limit of the gateway, in one place, as nats-server's
// Options hold its own: each a field with a safe default (Default), a
// flag of mcpp-gateway (RegisterFlags, and so an MCPP_ variable) and a
// check (Validate). gateway.Config embeds it, so the flags fill it; the
// pods (pod.Config) and their context registries (contexts.Config, the
// Contexts part) take it as it is and read their fields where they apply
// them; the welcome's limits (Welcome) and the participants' rate buckets
// (NewBuckets) are derived from it.
//
// A new limit is a field here with its default constant, its line in
// RegisterFlags and its case in Validate; then the code that applies it
// reads it (and, when participants must know it, a field of wire.Limits
// and its line in Welcome).
type Config struct {
	MaxMessageBytes int
	MaxContextBytes int

	// Contexts are the limits of a pod's contexts.
	Contexts

	// Rate and Burst are each participant's bucket of envelopes,
	// ContextCreateRate and ContextCreateBurst its bucket of contexts
	// opened (NewBuckets).
	Rate               float64
	Burst              int
	ContextCreateRate  float64
	ContextCreateBurst int

	SendQueue             int
	SendQueueBytes        ByteSize
	MaxConnections        int
	MaxParticipantsPerPod int
	// MaxPods bounds the pods open on the node at once (0: the gateway
	// counts what its memory holds, gateway.Config.PodsMemoryHolds).
	MaxPods int

	// History is the entries kept per pod (0: history off), HistoryAge
	// their age, HistoryBytes the bytes of all pods together.
	History      int
	HistoryAge   time.Duration
	HistoryBytes ByteSize

	// MCPSessionTimeout ends an MCP session (docs/protocol.md section 9)
	// that has made no request for this long; its participant leaves the
	// pod.
	MCPSessionTimeout time.Duration

	// Calls are the limits of the MCP requests and proposals in flight.
	Calls
}

// Contexts are the limits of a pod's contexts (docs/protocol.md section
// 3), which package contexts applies.
type Contexts struct {
	MaxDepth         int
	ContextTimeout   time.Duration // idle time after which a context concludes
	ContextRetention time.Duration // how long a concluded context stays queryable
	// ConclusionKinds are the kinds that conclude their context,
	// comma-separated as the flag gives them (ConclusionSet).
	ConclusionKinds           string
	MaxContextsPerParticipant int // active contexts one participant created
	MaxContextsPerPod         int // active contexts in the pod; also bounds the retained ones
	// ContextRate and ContextBurst are one context's bucket, whoever
	// sends in it.
	ContextRate  float64
	ContextBurst int
}

// Calls are the limits of a pod's MCP requests in flight and pending
// proposals (docs/protocol.md section 11).
type Calls struct {
	// MCPRequestTimeout is how long the gateway waits for the answer to
	// an mcp/request before it answers the requester itself; the Max…
	// bound the requests in flight, per requester and per pod.
	MCPRequestTimeout            time.Duration
	MaxMCPRequestsPerParticipant int
	MaxMCPRequestsPerPod         int
	ProposalTimeout              time.Duration
	MaxProposalsPerParticipant   int
	MaxProposalsPerPod           int
}

// The defaults of docs/protocol.md sections 5 and 7.
const (
	DefaultMaxMessageBytes              = 1 << 20
	DefaultMaxContextBytes              = 4096
	DefaultMaxDepth                     = 5
	DefaultContextTimeout               = 5 * time.Minute
	DefaultContextRetention             = 10 * time.Minute
	DefaultMaxContextsPerParticipant    = 256
	DefaultMaxContextsPerPod            = 10000
	DefaultRate                         = 100
	DefaultBurst                        = 200
	DefaultContextRate                  = 50
	DefaultContextBurst                 = 100
	DefaultContextCreateRate            = 10
	DefaultContextCreateBurst           = 20
	DefaultSendQueue                    = 1024
	DefaultSendQueueBytes               = 8 << 20
	DefaultMaxConnections               = 10000
	DefaultMaxParticipantsPerPod        = 1000
	DefaultMaxPods                      = 0 // what the node's memory holds
	DefaultHistory                      = 1000
	DefaultHistoryAge                   = 24 * time.Hour
	DefaultHistoryBytes                 = 256 << 20
	DefaultMCPSessionTimeout            = 30 * time.Minute
	DefaultMCPRequestTimeout            = 60 * time.Second
	DefaultMaxMCPRequestsPerParticipant = 128
	DefaultMaxMCPRequestsPerPod         = 1024
	DefaultProposalTimeout              = 10 * time.Minute
	DefaultMaxProposalsPerParticipant   = 32
	DefaultMaxProposalsPerPod           = 256
)

// DefaultConclusionKinds is --conclusion-kinds' default: wire's list.
var DefaultConclusionKinds = strings.Join(wire.DefaultConclusionKinds, ",")

// Default returns every limit at its default.
func Default() Config {
	return Config{
		MaxMessageBytes: DefaultMaxMessageBytes,
		MaxContextBytes: DefaultMaxContextBytes,
		Contexts: Contexts{
			MaxDepth:                  DefaultMaxDepth,
			ContextTimeout:            DefaultContextTimeout,
			ContextRetention:          DefaultContextRetention,
			ConclusionKinds:           DefaultConclusionKinds,
			MaxContextsPerParticipant: DefaultMaxContextsPerParticipant,
			MaxContextsPerPod:         DefaultMaxContextsPerPod,
			ContextRate:               DefaultContextRate,
			ContextBurst:              DefaultContextBurst,
		},
		Rate:                  DefaultRate,
		Burst:                 DefaultBurst,
		ContextCreateRate:     DefaultContextCreateRate,
		ContextCreateBurst:    DefaultContextCreateBurst,
		SendQueue:             DefaultSendQueue,
		SendQueueBytes:        DefaultSendQueueBytes,
		MaxConnections:        DefaultMaxConnections,
		MaxParticipantsPerPod: DefaultMaxParticipantsPerPod,
		MaxPods:               DefaultMaxPods,
		History:               DefaultHistory,
		HistoryAge:            DefaultHistoryAge,
		HistoryBytes:          DefaultHistoryBytes,
		MCPSessionTimeout:     DefaultMCPSessionTimeout,
		Calls: Calls{
			MCPRequestTimeout:            DefaultMCPRequestTimeout,
			MaxMCPRequestsPerParticipant: DefaultMaxMCPRequestsPerParticipant,
			MaxMCPRequestsPerPod:         DefaultMaxMCPRequestsPerPod,
			ProposalTimeout:              DefaultProposalTimeout,
			MaxProposalsPerParticipant:   DefaultMaxProposalsPerParticipant,
			MaxProposalsPerPod:           DefaultMaxProposalsPerPod,
		},
	}
}

// RegisterFlags defines one flag per limit on fs, with c's values as
// defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, "largest envelope accepted, in bytes")
	fs.IntVar(&c.MaxContextBytes, "max-context-bytes", c.MaxContextBytes, "largest context field, in bytes")
	fs.IntVar(&c.MaxDepth, "max-depth", c.MaxDepth, "deepest context nesting")
	fs.DurationVar(&c.ContextTimeout, "context-timeout", c.ContextTimeout, "a context concludes after this long without an envelope")
	fs.DurationVar(&c.ContextRetention, "context-retention", c.ContextRetention, "a concluded context stays queryable this long")
	fs.StringVar(&c.ConclusionKinds, "conclusion-kinds", c.ConclusionKinds, "kinds that conclude their context (comma-separated)")
	fs.IntVar(&c.MaxContextsPerParticipant, "max-contexts-per-participant", c.MaxContextsPerParticipant, "active contexts one participant may have created")
	fs.IntVar(&c.MaxContextsPerPod, "max-contexts-per-pod", c.MaxContextsPerPod, "active contexts in one pod")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "envelopes a second one participant may send")
	fs.IntVar(&c.Burst, "burst", c.Burst, "burst of --rate")
	fs.Float64Var(&c.ContextRate, "context-rate", c.ContextRate, "envelopes a second in one context, all senders together")
	fs.IntVar(&c.ContextBurst, "context-burst", c.ContextBurst, "burst of --context-rate")
	fs.Float64Var(&c.ContextCreateRate, "context-create-rate", c.ContextCreateRate, "contexts a second one participant may open")
	fs.IntVar(&c.ContextCreateBurst, "context-create-burst", c.ContextCreateBurst, "burst of --context-create-rate")
	fs.IntVar(&c.SendQueue, "send-queue", c.SendQueue, "envelopes queued for one participant before it is cut as a slow consumer (4008)")
	fs.Var(&c.SendQueueBytes, "send-queue-bytes", "bytes queued for one participant before it is cut as a slow consumer (4008), e.g. 8MiB")
	fs.IntVar(&c.MaxConnections, "max-connections", c.MaxConnections, "WebSocket connections in all")
	fs.IntVar(&c.MaxParticipantsPerPod, "max-participants-per-pod", c.MaxParticipantsPerPod, "participants in one pod")
	fs.IntVar(&c.MaxPods, "max-pods", c.MaxPods, "pods at once (0: what a quarter of the node's memory, or of --max-memory, holds at 64 KiB a pod with its connections)")
	fs.IntVar(&c.History, "history", c.History, "entries (envelopes and context events) of history kept per pod, in NATS JetStream (0 turns history off)")
	fs.DurationVar(&c.HistoryAge, "history-age", c.HistoryAge, "history entries older than this are discarded")
	fs.Var(&c.HistoryBytes, "history-bytes", "bytes of history kept for all pods together; the oldest go first (e.g. 256MiB)")
	fs.DurationVar(&c.MCPSessionTimeout, "mcp-session-timeout", c.MCPSessionTimeout, "an MCP session (/mcp) with no request for this long ends, and its participant leaves the pod")
	fs.DurationVar(&c.MCPRequestTimeout, "mcp-request-timeout", c.MCPRequestTimeout, "an mcp/request not answered within this long is answered by the gateway with a timeout error")
	fs.IntVar(&c.MaxMCPRequestsPerParticipant, "max-mcp-requests-per-participant", c.MaxMCPRequestsPerParticipant, "mcp/requests one participant may have in flight in a pod (request_limit_exceeded past it)")
	fs.IntVar(&c.MaxMCPRequestsPerPod, "max-mcp-requests-per-pod", c.MaxMCPRequestsPerPod, "mcp/requests in flight in one pod (request_limit_exceeded past it)")
	fs.DurationVar(&c.ProposalTimeout, "proposal-timeout", c.ProposalTimeout, "a proposal (mcp/proposal) nobody decided within this long expires")
	fs.IntVar(&c.MaxProposalsPerParticipant, "max-proposals-per-participant", c.MaxProposalsPerParticipant, "pending proposals of one participant in a pod (proposal_limit_exceeded past it)")
	fs.IntVar(&c.MaxProposalsPerPod, "max-proposals-per-pod", c.MaxProposalsPerPod, "pending proposals in one pod (proposal_limit_exceeded past it)")
}

// MaxLifetime bounds the durations that are added to the time of day in
// int64 nanoseconds (--context-timeout, --context-retention,
// --mcp-request-timeout, --proposal-timeout): about 100 years; longer ones
// overflow and wrap the deadlines around.
const MaxLifetime = 100 * 365 * 24 * time.Hour

// Validate reports limits that cannot work, naming their flags.
func (c *Config) Validate() error {
	switch {
	case c.MaxMessageBytes < 256:
		return fmt.Errorf("--max-message-bytes must be at least 256")
	case c.MaxContextBytes < 16:
		return fmt.Errorf("--max-context-bytes must be at least 16")
	case c.MaxDepth < 1:
		return fmt.Errorf("--max-depth must be at least 1")
	case c.ContextTimeout <= 0 || c.ContextRetention < 0:
		return fmt.Errorf("--context-timeout must be positive and --context-retention not negative")
	case c.ContextTimeout > MaxLifetime || c.ContextRetention > MaxLifetime:
		return fmt.Errorf("--context-timeout and --context-retention must be at most %v", MaxLifetime)
	case c.SendQueue < 1:
		return fmt.Errorf("--send-queue must be at least 1")
	case c.SendQueueBytes < 1<<10:
		return fmt.Errorf("--send-queue-bytes must be at least 1KiB")
	case !positiveFinite(c.Rate) || c.Burst < 1 || !positiveFinite(c.ContextRate) || c.ContextBurst < 1 || !positiveFinite(c.ContextCreateRate) || c.ContextCreateBurst < 1:
		// NaN and Inf parse as floats, but no bucket can use them and the
		// welcome, which lists the limits in JSON, could not be written.
		return fmt.Errorf("rates must be positive finite numbers and bursts at least 1")
	case c.MaxConnections < 1 || c.MaxParticipantsPerPod < 1 || c.MaxContextsPerParticipant < 1 || c.MaxContextsPerPod < 1:
		return fmt.Errorf("caps must be at least 1")
	case c.MaxPods < 0:
		return fmt.Errorf("--max-pods must be 0 (what the node's memory holds) or more")
	case c.History < 0:
		return fmt.Errorf("--history must be 0 (off) or more")
	case c.History > 0 && (c.HistoryAge < time.Second || c.HistoryBytes < 1<<20):
		return fmt.Errorf("--history-age must be at least 1s and --history-bytes at least 1MiB")
	case c.History > 0 && c.HistoryBytes < ByteSize(c.MaxFrameBytes()):
		return fmt.Errorf("--history-bytes (%d) must hold at least one envelope's frame (%d bytes, twice --max-message-bytes plus 64 KiB)", c.HistoryBytes, c.MaxFrameBytes())
	case c.MCPSessionTimeout <= 0:
		return fmt.Errorf("--mcp-session-timeout must be positive")
	case c.MCPRequestTimeout < 10*time.Millisecond || c.ProposalTimeout < time.Second:
		return fmt.Errorf("--mcp-request-timeout must be at least 10ms and --proposal-timeout at least 1s")
	case c.MCPRequestTimeout > MaxLifetime || c.ProposalTimeout > MaxLifetime:
		return fmt.Errorf("--mcp-request-timeout and --proposal-timeout must be at most %v", MaxLifetime)
	case c.MaxMCPRequestsPerParticipant < 1 || c.MaxMCPRequestsPerPod < 1 || c.MaxProposalsPerParticipant < 1 || c.MaxProposalsPerPod < 1:
		return fmt.Errorf("--max-mcp-requests-per-participant, --max-mcp-requests-per-pod, --max-proposals-per-participant and --max-proposals-per-pod must be at least 1")
	}
	return nil
}

func positiveFinite(f float64) bool { return f > 0 && !math.IsInf(f, 1) }

// MaxFrameBytes bounds a frame: an accepted envelope (with the fields the
// gateway fills) and its header, which can hold a "to" list as long as the
// envelope, and the context's ancestry. NATS must carry it and the
// history store it in one message.
func (c *Config) MaxFrameBytes() int { return 2*c.MaxMessageBytes + 64<<10 }

// SendRate is a participant's bucket of envelopes (--rate, --burst).
func (c *Config) SendRate() Rate { return Rate{Per: c.Rate, Burst: c.Burst} }

// CreateRate is a participant's bucket of contexts opened
// (--context-create-rate, --context-create-burst).
func (c *Config) CreateRate() Rate {
	return Rate{Per: c.ContextCreateRate, Burst: c.ContextCreateBurst}
}

// NewBuckets makes the participants' buckets of a node, at SendRate and
// CreateRate.
func (c *Config) NewBuckets() *BucketSet { return NewBucketSet(c.SendRate(), c.CreateRate()) }

// ContextBucket is one context's bucket (--context-rate,
// --context-burst).
func (c *Contexts) ContextBucket() Rate { return Rate{Per: c.ContextRate, Burst: c.ContextBurst} }

// ConclusionList is ConclusionKinds as a list, in the order given (never
// nil).
func (c *Contexts) ConclusionList() []string {
	kinds := []string{}
	for _, k := range strings.Split(c.ConclusionKinds, ",") {
		if k = strings.TrimSpace(k); k != "" {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// ConclusionSet is ConclusionKinds as a set, for the checks of each
// envelope.
func (c *Contexts) ConclusionSet() map[string]bool {
	set := map[string]bool{}
	for _, k := range c.ConclusionList() {
		set[k] = true
	}
	return set
}

// Welcome is what a participant is told of the limits when it joins
// (the welcome's limits, docs/protocol.md section 5).
func (c *Config) Welcome() wire.Limits {
	return wire.Limits{
		MaxMessageBytes:           c.MaxMessageBytes,
		MaxContextBytes:           c.MaxContextBytes,
		MaxDepth:                  c.MaxDepth,
		Rate:                      c.Rate,
		Burst:                     c.Burst,
		ContextRate:               c.ContextRate,
		ContextBurst:              c.ContextBurst,
		ContextCreateRate:         c.ContextCreateRate,
		ContextCreateBurst:        c.ContextCreateBurst,
		ContextTimeoutMS:          c.ContextTimeout.Milliseconds(),
		ContextRetentionMS:        c.ContextRetention.Milliseconds(),
		ConclusionKinds:           c.ConclusionList(),
		MaxContextsPerParticipant: c.MaxContextsPerParticipant,
		MaxContextsPerPod:         c.MaxContextsPerPod,
		MaxParticipantsPerPod:     c.MaxParticipantsPerPod,
		MaxConnections:            c.MaxConnections,
		MaxPods:                   c.MaxPods,
		SendQueue:                 c.SendQueue,
		SendQueueBytes:            int64(c.SendQueueBytes),
		History:                   c.History,
		HistoryAgeMS:              c.HistoryAge.Milliseconds(),
		HistoryBytes:              int64(c.HistoryBytes),
		MCPSessionTimeoutMS:       c.MCPSessionTimeout.Milliseconds(),
	}
}
