// Command mcpp is the command-line client of the MCPP pod gateway, built
// on its Go client (package client) and wire types (package wire).
//
//	mcpp tail     --pod NAME [filter flags] [--history N|all] [--fold=0] [--resume-file F] [--count N] [--all] [--quiet] [--pretty]
//	mcpp send     --pod NAME --kind KIND [--to a,b] [--context JSON|PATH] [--payload JSON|@FILE|-] [--id ID]
//	mcpp send     --pod NAME --stdin [--kind KIND] [--rate N] ...   (one envelope JSON object per line)
//	mcpp contexts --pod NAME [--state active|concluded|all] [--json]
//	mcpp history  --pod NAME [--fold=0] [--context ID] [--limit N] [--json | --pretty]
//	mcpp bridge   --pod NAME --participant ID [--max-in-flight N] [--request-timeout D] (-- COMMAND [ARGS...] | --url URL)
//
// Every command takes --gateway (default $MCPP_GATEWAY, else
// ws://127.0.0.1:8080; the base URL or the /ws URL), --pod ($MCPP_POD),
// --participant ($MCPP_PARTICIPANT) and --token ($MCPP_TOKEN, sent as
// Authorization: Bearer).
//
// tail joins the pod over WebSocket and prints each envelope it receives as
// one line of JSON, exactly the bytes the gateway sent; welcome and presence
// go to standard error unless --all. Its filter flags are the query
// parameters of docs/protocol.md section 4, and the gateway applies them.
// --history prints the pod's past first (docs/protocol.md section 8),
// --resume-file keeps the id of the last envelope printed so that a restarted
// tail resumes after it, and a lost connection is restored and resumed by the
// client. --pretty prints a view for people instead.
//
// send, contexts and history do not join the pod: they POST to
// /pods/NAME/envelopes (docs/protocol.md section 6), so nobody sees them join
// or leave. send sends one envelope (or one per line of standard input with
// --stdin, paced) and exits 1, printing the error, when the gateway refuses
// one. contexts prints the pod's contexts as a tree; history prints the pod's
// history, folded or not, page by page.
//
// Exit status: 0 done, 1 refused by the gateway (an HTTP refusal, a
// refused envelope or request, or the connection failing for good), 2
// usage error. "mcpp COMMAND -h" describes each command's flags.
package main
