// Trusting a private CA on Node: the `ca` option of connect() and
// publish(). Node checks a wss:// or https:// gateway's certificate
// against its default roots (its bundled Mozilla list, plus the
// certificates of NODE_EXTRA_CA_CERTS, read when Node starts); `ca` adds
// one CA to those for the client's own connections. A browser trusts what
// its platform trusts: there `ca` is a TypeError.

import { onNode } from "./connection.js";

/** A CA certificate, PEM: its text, or the bytes of a .pem file. */
export type CACertificate = string | Buffer;

/**
 * The certificates a connection made with `ca` trusts: Node's default
 * roots (with NODE_EXTRA_CA_CERTS where this Node can list them, 22.15
 * and later) and `ca`; undefined without `ca`, for Node's own defaults.
 * Giving Node a `ca` replaces its defaults, hence the list.
 */
export async function trustedCAs(ca: CACertificate | undefined): Promise<Array<string | Buffer> | undefined> {
  if (ca === undefined) return undefined;
  if (typeof ca !== "string" && !Buffer.isBuffer(ca)) {
    throw new TypeError("ca: a CA certificate in PEM, as a string or a Buffer");
  }
  if (!onNode()) throw new TypeError("ca is for Node: a browser trusts the CAs its platform trusts");
  const tls = await import("node:tls");
  const list = (tls as { getCACertificates?: (type: string) => string[] }).getCACertificates;
  const defaults = typeof list === "function" ? list("default") : tls.rootCertificates;
  return [...defaults, ca];
}
