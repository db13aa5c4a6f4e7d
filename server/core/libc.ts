/**
 * glibc's functions through FFI, for the few calls the runtime does not offer.
 * @module
 */

import { ffiGranted } from "./ffi_permission.ts";

/**
 * Binds `symbols` of glibc, or null where that cannot be done: without the FFI permission (asked first, as
 * `Deno.dlopen` would prompt for it on a terminal) or without glibc (musl).
 * @param symbols the functions and their FFI signatures
 */
export function glibc<S extends Deno.ForeignLibraryInterface>(
  symbols: S,
): Deno.DynamicLibrary<S>["symbols"] | null {
  try {
    if (!ffiGranted("libc.so.6")) return null;
    return Deno.dlopen("libc.so.6", symbols).symbols;
  } catch {
    return null;
  }
}
