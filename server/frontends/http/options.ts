/**
 * The HTTP frontend's options, and what every route file builds its routes from.
 * @module
 */

import type { InferencePipeline } from "../../pipeline/pipeline.ts";
import type { FrontendOptions } from "../frontend.ts";

/** What the HTTP frontend serves and how. */
export interface HttpOptions extends FrontendOptions {
  /** The largest request body accepted, in bytes (`--http-max-input-size`). */
  maxInputSize: number;
}

/** What the route files build their routes from. */
export interface RouteDeps {
  /** The inference pipeline (and, through it, the models). */
  pipeline: InferencePipeline;
  /** Server facts and limits. */
  options: HttpOptions;
}
