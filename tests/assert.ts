/**
 * The few assertions the tests use (JSR's std is unreachable here): deep equality, truthiness, and thrown or
 * rejected errors checked by class, exact message and, for ServerError, code.
 * @module
 */

import nodeAssert from "node:assert/strict";

/**
 * Asserts that a condition holds.
 * @param condition the condition
 * @param message what was expected, shown on failure
 */
export function assert(condition: unknown, message = "Expected a truthy value"): asserts condition {
  nodeAssert.ok(condition, message);
}

/**
 * Asserts that two values are deeply and strictly equal (same prototypes, -0 distinct from 0, NaN equal to NaN).
 * @param actual the value computed
 * @param expected the value expected
 * @param message shown on failure
 */
export function assertEquals<T>(actual: unknown, expected: T, message?: string): asserts actual is T {
  if (message === undefined) nodeAssert.deepStrictEqual(actual, expected);
  else nodeAssert.deepStrictEqual(actual, expected, message);
}

/** What a thrown error must be: its class, exact message and (optionally) its `code`. */
export interface ErrorExpectation {
  /** The exact message. */
  message: string;
  /** The exact `code` property (ServerError codes), when given. */
  code?: string;
}

// deno-lint-ignore no-explicit-any
type ErrorClass<E extends Error> = abstract new (...args: any[]) => E;

function check<E extends Error>(err: unknown, cls: ErrorClass<E>, expected: ErrorExpectation): E {
  if (!(err instanceof cls)) {
    const got = err instanceof Error ? `${err.constructor.name}: ${err.message}` : String(err);
    nodeAssert.fail(`Expected ${cls.name} to be thrown, got ${got}`);
  }
  nodeAssert.equal(err.message, expected.message);
  if (expected.code !== undefined) {
    nodeAssert.equal((err as unknown as { code?: unknown }).code, expected.code, "Error code");
  }
  return err;
}

/**
 * Asserts that a function throws an error of a class with an exact message (and code).
 * @param fn the function to call
 * @param cls the error class expected
 * @param expected the exact message and optional code
 * @returns the error thrown
 */
export function assertThrows<E extends Error>(
  fn: () => unknown,
  cls: ErrorClass<E>,
  expected: ErrorExpectation,
): E {
  try {
    fn();
  } catch (err) {
    return check(err, cls, expected);
  }
  return nodeAssert.fail(`Expected ${cls.name} to be thrown, but nothing was`);
}

/**
 * Asserts that a promise (or async function) rejects with an error of a class with an exact message (and code).
 * @param fn the async function to call
 * @param cls the error class expected
 * @param expected the exact message and optional code
 * @returns the error thrown
 */
export async function assertRejects<E extends Error>(
  fn: () => Promise<unknown>,
  cls: ErrorClass<E>,
  expected: ErrorExpectation,
): Promise<E> {
  try {
    await fn();
  } catch (err) {
    return check(err, cls, expected);
  }
  return nodeAssert.fail(`Expected ${cls.name} to be rejected, but it resolved`);
}
