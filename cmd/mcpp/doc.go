// Command mcpp is the command-line client of the MCPP pod gateway.
//
//	mcpp tail     --pod NAME [filter flags] [--count N] [--all] [--quiet] [--pretty]
//	mcpp send     --pod NAME --kind KIND [--to a,b] [--context JSON|PATH] [--payload JSON|@FILE|-] [--id ID]
//	mcpp send     --pod NAME --stdin [--kind KIND] ...   (one envelope JSON object per line)
//	mcpp contexts --pod NAME [--state active|concluded|all] [--json]
//
// Every command takes --gateway (default $MCPP_GATEWAY, else
// ws://127.0.0.1:8080; the base URL or the /ws URL), --pod ($MCPP_POD),
// --participant ($MCPP_PARTICIPANT) and --token ($MCPP_TOKEN, sent as
// Authorization: Bearer).
//
// tail prints each envelope it receives as one line of JSON, exactly the
// bytes the gateway sent; welcome and presence go to standard error unless
// --all. Its filter flags are the query parameters of SPEC section 4, and
// the gateway applies them. --pretty prints a view for people instead.
//
// send sends one envelope (or one per line of standard input with --stdin)
// and waits for the gateway's answer: it exits 1 and prints the error when
// the gateway refuses one.
//
// contexts prints the pod's contexts as a tree.
//
// Exit status: 0 done, 1 refused by the gateway (an HTTP refusal at the
// upgrade, a system/error, or the connection failing), 2 usage error.
// "mcpp COMMAND -h" describes each command's flags.
package main
