/**
 * The TypeScript client of the MCPP pod gateway (docs/protocol.md).
 *
 * ```ts
 * import { connect, Reconnected } from "@mcpp/client";
 *
 * const client = await connect("ws://127.0.0.1:8080", { pod: "lab", participant: "alice" });
 * await client.send({ kind: "chat", payload: { text: "hello" } });
 * for await (const item of client) {
 *   if (item instanceof Reconnected) continue; // item.resumed false: a gap
 *   console.log(item.from, item.kind, item.payload);
 * }
 * ```
 *
 * @module
 */

export {
  connect,
  Client,
  Reconnected,
  DEFAULT_MAX_DELAY_MS,
  DEFAULT_MIN_DELAY_MS,
  DEFAULT_TIMEOUT_MS,
  type CallOptions,
  type ClientState,
  type ConnectOptions,
  type ReconnectOptions,
  type SendOptions,
  type StreamItem,
} from "./client.js";
export type { StandardWebSocket, StandardWebSocketConstructor } from "./connection.js";
export {
  ClientClosedError,
  ClosedError,
  DisconnectedError,
  GatewayError,
  KickedError,
  MCPPError,
  RefusedError,
  RevokedError,
  TokenExpiredError,
} from "./errors.js";
export { newId } from "./id.js";
export { publish, resultError, type PublishOptions } from "./publish.js";
export { contextOf, validTraceparent } from "./trace.js";
export type { CACertificate } from "./tls.js";
export {
  CloseCodes,
  GATEWAY_ID,
  Kinds,
  PROTOCOL,
  SERVES_MCP,
  type Capability,
  type CapabilityEvent,
  type ContextEvent,
  type ContextObject,
  type ContextStats,
  type EffectiveFilter,
  type Envelope,
  type ErrorPayload,
  type Filter,
  type Grant,
  type HistoryInfo,
  type Identity,
  type Kick,
  type Kicked,
  type Lifecycle,
  type Limits,
  type PublishResult,
  type Refreshed,
  type Revoke,
  type Trace,
  type Welcome,
} from "./types.js";
