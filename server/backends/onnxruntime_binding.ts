/**
 * onnxruntime-node's native binding, which the server's thread and the worker instances call directly on the hot
 * path: its public `run` defers every call with setImmediate and re-validates feeds the server has already
 * validated (26 µs against 16 µs a run of `simple`).
 * @module
 */

/**
 * The native session class of onnxruntime-node's binding (what its public InferenceSession wraps), loaded and
 * initialized once per thread.
 * @returns the class, or undefined where the binding cannot be loaded this way (the public API is then used)
 */
export async function nativeSessionClass<Session>(): Promise<(new () => Session) | undefined> {
  try {
    const mod = await import("onnxruntime-node/dist/binding.js") as unknown as {
      binding: { InferenceSession: new () => Session };
      initOrt: () => void;
    };
    mod.initOrt();
    return typeof mod.binding?.InferenceSession === "function" ? mod.binding.InferenceSession : undefined;
  } catch {
    return undefined;
  }
}
