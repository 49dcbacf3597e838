// Package tokens decides who a participant is from the token it presents
// (docs/protocol.md section 1): an entry of the gateway's token file, a
// JWT signed by a key the gateway trusts, or an access token of an OAuth
// issuer (oauth.go).
//
// # One verifier for every token
//
// A Verifier is made once, from a Config that mirrors the gateway's flags,
// and asked about every upgrade:
//
//	v, err := tokens.New(ctx, tokens.Config{
//		File:          "tokens.json",           // --tokens
//		JWTSecretFile: "jwt.secret",            // --jwt-secret-file (HS256, HS384, HS512)
//		JWKSURL:       "https://idp/jwks.json", // --jwt-jwks-url (RS*, PS*, ES*, EdDSA)
//		Issuer:        "https://idp/",          // --jwt-issuer
//		Audience:      "mcpp",                  // --jwt-audience
//	})
//	...
//	id, refusal := v.Verify(r.Context(), token, pod)
//	if refusal != nil {
//		w.WriteHeader(refusal.Status)             // 401 or 403
//		json.NewEncoder(w).Encode(refusal.Wire()) // {"error": "unauthorized", "message": "exp: the token expired at …"}
//		return
//	}
//	// id.Participant, id.Capabilities, id.Expires …
//
// Verify looks the token up in the token file first, comparing its SHA-256
// with every entry's in constant time. A JWT whose iss is an OAuth
// issuer's is that issuer's access token (below). Any other token is
// verified as a JWT, when a JWT key is configured, in this order, and the
// first failure is the refusal:
//
//  1. The token is three base64url parts whose first two are JSON
//     objects (else ClaimToken).
//  2. Its alg is one that the configured keys verify ("alg"): HS256,
//     HS384, HS512 with the secret; RS256…RS512 and PS256…PS512 with an
//     RSA key; ES256, ES384, ES512 with an ECDSA key of the matching
//     curve; EdDSA with an Ed25519 key. "none" never is, and a public key
//     is never used as an HMAC secret.
//  3. The key: with a kid and a JWKS, the JWKS's key of that kid, which
//     must be for signatures and meet the minimums of a key file's (an
//     RSA key of 2048 bits or more: "kid"), and whose kind and own alg
//     must fit ("alg"); a kid that the JWKS lacks is tried with the key
//     file's keys that fit. Without a kid, every key of the file and of
//     the JWKS that fits the alg (a JWKS key below the minimums never
//     is).
//  4. The signature (ClaimSignature).
//  5. The claims: exp, required unless Config.AllowNoExp, and nbf, with
//     Leeway; iat, not later than now plus Leeway; iss and aud, when
//     configured; sub, a valid participant id; pods, a list of pod
//     patterns; caps, a list of capabilities (each "exp", "nbf", "iat",
//     "iss", "aud", "sub", "pods", "caps").
//  6. The pod: the token's pods must allow it (403, "pods").
//
// Every refusal is 401 (wire.CodeUnauthorized) but the last, which is 403
// (wire.CodeForbidden). Refusal.Claim names what failed, and so does the
// message, which starts with the claim for a JWT ("exp: the token expired
// at …"); a token that is missing, unknown or not a JWT at all is
// ClaimToken ("unknown token"). No message contains the token.
//
// # The claims of a JWT
//
//	{"sub": "alice",                        // the participant id (required)
//	 "pods": ["lab", "lab-*"],              // the pods it may join (absent: every pod)
//	 "caps": ["chat", {"kind": "mcp/request", "payload": {"method": "tools/call"}}],
//	                                        // its capabilities (absent: Config.DefaultCapabilities)
//	 "exp": 1795000000,                     // required (unless AllowNoExp), with Leeway
//	 "nbf": 1794990000, "iat": 1794990000,  // honoured when present, with Leeway
//	 "iss": "https://idp/", "aud": "mcpp"}  // checked when configured (aud may be a list)
//
// Identity.Expires is exp plus Leeway: the gateway ends a connection then,
// unless its client sent a fresh token first. A JWT without exp would
// never end, and is refused ("exp: the token has no exp claim; …")
// unless Config.AllowNoExp (--jwt-allow-no-exp, unsafe) accepts it, with
// a zero Expires. Tokens of the token file have no exp.
//
// # OAuth access tokens
//
// With Config.OAuthIssuers, the verifier is an OAuth resource server's:
//
//	v, err := tokens.New(ctx, tokens.Config{
//		OAuthIssuers:  []tokens.OAuthIssuer{{Name: "team", URL: "https://idp.example.com"}}, // --oauth-issuer team=…
//		OAuthResource: "https://gw.example.com",                                            // --oauth-resource
//	})
//
// New fetches each issuer's metadata (RFC 8414, or OpenID Connect
// discovery) for its jwks_uri, whose keys are then fetched and refreshed
// as Config.JWKSURL's are; Reload fetches both again. An access token is
// verified with its issuer's keys by steps 1 to 5 above (exp always
// required; iss is the issuer), then: its aud names the gateway (the
// resource, its /mcp, or the pod's /mcp?pod=POD); its participant is the
// issuer's name, a colon and its sub (or Config.OAuthParticipantClaim);
// its scope (or scp) grants its pods (mcpp:pod:POD) and capabilities
// (mcpp:cap:KIND, never "*"; mcpp:call:TOOL): nothing else does, neither
// its pods and caps claims nor Config.DefaultCapabilities. A pod no scope
// names is 403 ClaimScope.
//
// # Keys that change
//
// The JWKS is fetched at New, at Reload, every Config.JWKSRefresh, and
// when a token names a kid that it lacks (at most once per
// UnknownKIDInterval, however many such tokens come). A key that leaves
// the JWKS refuses new tokens from then on; the identities already
// verified with it are not revoked, and end at their own exp.
//
// A fetch fails when the server answers other than 200, when it answers
// with a redirect (which is not followed: the JWKS's address alone says
// where the keys come from), when its answer is larger than MaxJWKSBytes
// (1 MiB), and when the JWKS has keys for signatures but none that meets
// the minimums. A key below them beside good ones is logged and never
// used. A failed fetch at New is an error (the gateway does not start);
// later, the keys of the last good fetch stay in use.
//
// Reload (the gateway's SIGHUP) reads the token file and the key files
// again and fetches the JWKS again, all or nothing: when one fails, the
// verifier keeps what it had and the error names the flag. Revoked then
// tells which identities of the token file are gone, so that the gateway
// closes their connections. Watch does the same when one of the files
// changes on disk.
package tokens
