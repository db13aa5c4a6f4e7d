/**
 * Whether the process may load a native library, asked without prompting: `Deno.dlopen` itself would stop at an
 * interactive prompt on a terminal when the FFI permission was not given.
 * @module
 */

/**
 * Whether the FFI permission covers `path` (`--allow-ffi`, or `--allow-ffi=<path>`).
 * @param path the library
 */
export function ffiGranted(path: string): boolean {
  try {
    return Deno.permissions.querySync({ name: "ffi", path }).state === "granted";
  } catch {
    return false;
  }
}
