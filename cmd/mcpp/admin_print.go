package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcpp/gateway/wire"
)

// How mcpp admin prints the operator's API's answers for people: tables,
// one row per pod, member, proposal, grant or ban.

// printPods prints a page of pods, with the header when head is set.
func printPods(w io.Writer, pods []wire.AdminPod, head bool) {
	if len(pods) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if head {
		fmt.Fprintln(tw, "POD\tNODES\tMEMBERS\tOBSERVERS\tCONTEXTS\tPROPOSALS\tGRANTS\tBANS")
	}
	for _, p := range pods {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d/%d\t%d\t%d\t%d\n", p.Name, len(p.Nodes), p.MemberCount, p.Observers,
			p.Contexts.Active, p.Contexts.Concluded, p.ProposalsPending, p.Grants, p.Bans)
	}
	_ = tw.Flush()
}

// printPod prints one pod in full.
func printPod(w io.Writer, p *wire.AdminPodDetail, now time.Time) {
	fmt.Fprintf(w, "pod %s on %s: %d member%s", p.Name, strings.Join(p.Nodes, ", "), p.MemberCount, plural(p.MemberCount))
	if p.Observers > 0 {
		fmt.Fprintf(w, ", %d observer%s", p.Observers, plural(p.Observers))
	}
	fmt.Fprintf(w, ", %d active context%s (%d concluded)\n", p.Contexts.Active, plural(p.Contexts.Active), p.Contexts.Concluded)

	if len(p.Members) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "MEMBER\tNODE\tVIA\tSINCE\tQUEUE\tADDR")
		for _, m := range p.Members {
			queue := "-"
			if m.Queue != nil {
				queue = fmt.Sprintf("%d (%dB)", m.Queue.Messages, m.Queue.Bytes)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Node, orDash(m.Via), sinceText(m.Since, now), queue, orDash(m.Addr))
		}
		_ = tw.Flush()
		if n := p.MemberCount - len(p.Members); n > 0 {
			fmt.Fprintf(w, "(and %d more)\n", n)
		}
	}
	if len(p.ActiveContexts) > 0 {
		fmt.Fprintln(w)
		renderTree(w, p.ActiveContexts, now)
	}
	if len(p.PendingProposals) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PROPOSAL\tPROPOSER\tTO\tCALL\tEXPIRES")
		for _, pr := range p.PendingProposals {
			call := pr.Method
			if pr.Tool != "" {
				call += " " + pr.Tool
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", pr.ID, pr.Proposer, pr.To, call, pr.Expires)
		}
		_ = tw.Flush()
	}
	if len(p.GrantsInForce) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "GRANT\tRECIPIENT\tGRANTOR\tCONTEXT\tCAPABILITIES")
		for _, g := range p.GrantsInForce {
			ctx := g.Context
			if ctx == "" {
				ctx = "(pod)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", g.GrantID, g.Recipient, g.Grantor, ctx, capabilitiesText(g.Capabilities))
		}
		_ = tw.Flush()
	}
	if len(p.BansInForce) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "BANNED\tBY\tUNTIL\tREASON")
		for _, b := range p.BansInForce {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Participant, b.By, b.Until, b.Reason)
		}
		_ = tw.Flush()
	}
}

// sinceText is how long ago since was, or "-".
func sinceText(since *string, now time.Time) string {
	if since == nil {
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, *since)
	if err != nil {
		return *since
	}
	return age(now.Sub(t))
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// capabilitiesText is a capability list as JSON, one line.
func capabilitiesText(caps []wire.Capability) string {
	parts := make([]string, len(caps))
	for i, c := range caps {
		parts[i] = c.String()
	}
	return "[" + strings.Join(parts, ",") + "]"
}
