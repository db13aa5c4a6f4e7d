/**
 * The HTTP frontend's path matching, shared by the main thread's handler and the listener threads.
 * @module
 */

/**
 * `/v2/models/{model}[/versions/{version}]/infer` with no percent-encoded segment: the inference route,
 * matched before the general router (the hot path).
 */
export const INFER_PATH = /^\/v2\/models\/([^/%]+)(?:\/versions\/([0-9]+))?\/infer$/;

/** The path of an absolute request URL, without parsing the whole URL (a hot path). */
export function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  let end = url.indexOf("?", start);
  const hash = url.indexOf("#", start);
  if (end < 0 || (hash >= 0 && hash < end)) end = hash;
  return end < 0 ? url.slice(start) : url.slice(start, end);
}
