/**
 * Restricted APIs (`--http-restricted-api`, `--grpc-restricted-protocol`): Triton's API groups and the header check
 * a restricted call must pass; the frontends' route and method tables say which group each endpoint belongs to.
 * @module
 */

/** Triton's API groups, in the order its documentation lists them. */
export const API_GROUPS = [
  "health",
  "metadata",
  "inference",
  "shared-memory",
  "model-config",
  "model-repository",
  "statistics",
  "trace",
  "logging",
] as const;

/** One API group. */
export type ApiGroup = typeof API_GROUPS[number];

/** The header (HTTP) or metadata key (gRPC, without its `triton-grpc-protocol-` prefix) and the value it must hold. */
export interface Restriction {
  key: string;
  value: string;
}

/** The restricted groups of one frontend; a group left out is open to every client. */
export type Restrictions = Partial<Record<ApiGroup, Restriction>>;

/** The prefix of a gRPC restriction's metadata key. */
export const GRPC_RESTRICTED_PREFIX = "triton-grpc-protocol-";

/**
 * Parses the values of one restriction flag, each `<group>[,<group>...]:<key>=<value>`.
 * @param entries the flag's values (the flag may be repeated)
 * @param flag the flag's name, for messages
 * @returns the restricted groups
 * @throws Error naming the bad value: an unknown group, a group in two entries, a missing key or value
 */
export function parseRestrictions(entries: readonly string[], flag: string): Restrictions {
  const out: Restrictions = {};
  for (const entry of entries) {
    const colon = entry.indexOf(":");
    const eq = entry.indexOf("=", colon + 1);
    if (colon <= 0 || eq < 0) {
      throw new Error(`Bad value '${entry}' for --${flag}: expected <api>[,<api>...]:<key>=<value>`);
    }
    const key = entry.slice(colon + 1, eq).trim();
    const value = entry.slice(eq + 1);
    if (key === "" || value === "") {
      throw new Error(`Bad value '${entry}' for --${flag}: the key and the value must not be empty`);
    }
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(key)) {
      throw new Error(`Bad value '${entry}' for --${flag}: '${key}' is not a valid header name`);
    }
    for (const name of entry.slice(0, colon).split(",").map((s) => s.trim())) {
      if (!(API_GROUPS as readonly string[]).includes(name)) {
        throw new Error(
          `Bad value '${entry}' for --${flag}: unknown API '${name}' (expected one of ${
            API_GROUPS.join(", ")
          })`,
        );
      }
      const group = name as ApiGroup;
      if (out[group]) {
        throw new Error(`Bad value '${entry}' for --${flag}: API '${group}' is in more than one group`);
      }
      out[group] = { key, value };
    }
  }
  return out;
}

/**
 * Whether a header value is the expected one, in time that does not depend on where they differ.
 * @param given the value the client sent, null when it sent none
 * @param expected the configured value
 */
export function matchesRestriction(given: string | null | undefined, expected: string): boolean {
  if (given === null || given === undefined) return false;
  const a = new TextEncoder().encode(given);
  const b = new TextEncoder().encode(expected);
  let diff = a.length ^ b.length;
  for (let i = 0; i < b.length; i++) diff |= (a[i] ?? 0) ^ b[i]!;
  return diff === 0;
}
